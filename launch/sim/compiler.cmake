# compiler.cmake: included before project() when RA_SIMGRID is on: the C
# compiler becomes SimGrid's smpicc (docs/SIMULATION.md). smpicc links every
# program as a shared object for smpirun; during the configure alone,
# SMPI_PRETEND_CC makes it behave as a plain compiler, so that CMake's
# compiler checks can run what they build.
find_program(RA_SMPICC smpicc)
if(NOT RA_SMPICC)
  message(FATAL_ERROR "RA_SIMGRID=ON needs SimGrid's smpicc "
          "(apt-get install libsimgrid-dev, or launch/setup.sh --sim DIR)")
endif()
set(CMAKE_C_COMPILER ${RA_SMPICC})
set(ENV{SMPI_PRETEND_CC} 1)

# outer.cmake: the simulated build inside the ordinary one. When SimGrid's
# smpicc is found (RA_SIM AUTO; not in a sanitizer build, whose tests do
# not run it) or required (ON), the ordinary build also
# configures and builds this source tree with RA_SIMGRID=ON in
# <build>/sim, so that `launch/setup.sh` and `launch/test.sh` make
# ringattn-sim with the rest and the test `sim_exact_p16` finds it
# (docs/SIMULATION.md). Open MPI and SMPI objects cannot share a folder.
set(RA_SIM AUTO CACHE STRING "Also build ringattn-sim (SimGrid): AUTO, ON or OFF")
find_program(RA_SMPICC smpicc)
find_program(RA_SMPIRUN smpirun)
set(RA_SIM_PROGRAM "")
set(RA_SIM_WANTED ON)
if(RA_SIM STREQUAL "OFF" OR (RA_SIM STREQUAL "AUTO" AND RA_SANITIZE))
  set(RA_SIM_WANTED OFF)
endif()
if(RA_SIM_WANTED AND RA_SMPICC AND RA_SMPIRUN)
  include(ExternalProject)
  set(RA_SIM_DIR ${PROJECT_BINARY_DIR}/sim)
  ExternalProject_Add(ringattn_sim_build
    SOURCE_DIR ${PROJECT_SOURCE_DIR}
    BINARY_DIR ${RA_SIM_DIR}
    CMAKE_ARGS -DRA_SIMGRID=ON -DCMAKE_BUILD_TYPE=Release
    INSTALL_COMMAND ""
    BUILD_ALWAYS ON
    USES_TERMINAL_BUILD ON)
  set(RA_SIM_PROGRAM ${RA_SIM_DIR}/ringattn-sim)
  message(STATUS "simulated build: ${RA_SIM_PROGRAM} (SimGrid ${RA_SMPICC})")
elseif(RA_SIM STREQUAL "ON")
  message(FATAL_ERROR "RA_SIM=ON but SimGrid's smpicc and smpirun were not "
          "found (apt-get install libsimgrid-dev)")
else()
  message(STATUS "simulated build: off (RA_SIM=OFF, a sanitizer build, or "
          "no smpicc: apt-get install libsimgrid-dev)")
endif()

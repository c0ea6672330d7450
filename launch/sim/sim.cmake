# sim.cmake: the simulated build (RA_SIMGRID=ON, a build folder of its own):
# engine/ and comm/ (with comm/perf/ and comm/sim/, the simulated build's
# own) compiled by smpicc with launch/sim/ into ringattn-sim,
# which smpirun runs on a simulated platform (docs/SIMULATION.md). No HDF5,
# no io/, no command line: inputs are made in memory.
find_package(OpenMP REQUIRED COMPONENTS C)
find_package(PkgConfig REQUIRED)
set(RA_BLAS_MODULE openblas CACHE STRING "pkg-config module of OpenBLAS")
pkg_check_modules(RA_BLAS REQUIRED IMPORTED_TARGET ${RA_BLAS_MODULE})
find_path(RA_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h)
find_library(RA_DNNL_LIBRARY dnnl)

file(GLOB RA_SIM_LIBRARY_SOURCES CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/engine/*.c ${PROJECT_SOURCE_DIR}/comm/*.c
     ${PROJECT_SOURCE_DIR}/comm/perf/*.c ${PROJECT_SOURCE_DIR}/comm/sim/*.c)
file(GLOB RA_SIM_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/launch/sim/*.c)
# ringattn-sim parses its options with the registry (launch/registry.c).
list(APPEND RA_SIM_SOURCES ${PROJECT_SOURCE_DIR}/launch/registry.c)
# `--profile FILE` reads a probe's JSON with the planning unit's reader
# (comm/perf/profile_json.c, jansson), and `--json FILE` writes bench's row
# (comm/perf/bench_rows.c). launch/sim/'s header chain names HDF5 types,
# so HDF5's headers are on the include path; nothing of HDF5 is linked.
set(RA_HDF5_MODULE hdf5-openmpi CACHE STRING "pkg-config module of parallel HDF5")
pkg_check_modules(RA_HDF5 REQUIRED ${RA_HDF5_MODULE})
pkg_check_modules(RA_JANSSON REQUIRED IMPORTED_TARGET jansson)
add_executable(ringattn_sim ${RA_SIM_LIBRARY_SOURCES} ${RA_SIM_SOURCES})
set_target_properties(ringattn_sim PROPERTIES OUTPUT_NAME ringattn-sim)
target_include_directories(ringattn_sim PRIVATE
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/engine
  ${PROJECT_SOURCE_DIR}/comm ${PROJECT_SOURCE_DIR}/comm/perf
  ${PROJECT_SOURCE_DIR}/comm/sim ${PROJECT_SOURCE_DIR}/launch/sim
  ${PROJECT_SOURCE_DIR}/launch ${PROJECT_SOURCE_DIR}/io ${RA_HDF5_INCLUDE_DIRS})
# SMPI_NO_OVERRIDE_MALLOC: smpi_helpers.h would make malloc and free macros,
# which clash with engine/carve.c; large blocks are folded by the sim's own
# allocation hooks instead (comm/sim/sim_hooks.c).
target_compile_definitions(ringattn_sim PRIVATE RA_BUILDING_LIBRARY
                           SMPI_NO_OVERRIDE_MALLOC)
target_compile_options(ringattn_sim PRIVATE -Wall -Wextra -Wno-unused-parameter
                       -Wno-missing-field-initializers)
target_link_libraries(ringattn_sim PRIVATE OpenMP::OpenMP_C PkgConfig::RA_BLAS
                      PkgConfig::RA_JANSSON m)
if(RA_DNNL_INCLUDE_DIR AND RA_DNNL_LIBRARY)
  target_compile_definitions(ringattn_sim PRIVATE RA_HAVE_ONEDNN)
  target_include_directories(ringattn_sim PRIVATE ${RA_DNNL_INCLUDE_DIR})
  target_link_libraries(ringattn_sim PRIVATE ${RA_DNNL_LIBRARY})
endif()
# The seam between the simulator and the engine (docs/DESIGN.md, "The
# simulated build"): the linker sends comm/'s calls of the kernels and of
# the block allocator to comm/sim/sim_hooks.c, which runs them for real
# (exact mode) or injects their time and folds their buffers (at scale),
# its non-blocking collectives to sim_collectives.c, and its polls to
# sim_waits.c. No source file of the call path (engine/, comm/'s own) knows.
set(RA_SIM_WRAPPED ra_kernel_forward_block ra_kernel_backward_block
    ra_carve ra_carve_alloc ra_carve_free
    MPI_Iallreduce MPI_Ibcast MPI_Ireduce_scatter
    MPI_Comm_idup MPI_Isend MPI_Irecv MPI_Testall strat_wait ring_poll)
foreach(fn ${RA_SIM_WRAPPED})
  target_link_options(ringattn_sim PRIVATE -Wl,--wrap=${fn})
endforeach()

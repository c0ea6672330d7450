# layering.cmake: the build's check that the call path (engine/, comm/*,
# io/) includes nothing of the planning unit (comm/perf/) nor of the
# simulated build's seam and run (comm/sim/, which only ringattn-sim
# compiles: the call path never knows it is simulated), run as a script
# (cmake -DRA_SOURCE=<tree> -DRA_STAMP=<file> -P layering.cmake) before
# ra_comm compiles. The include paths already refuse `#include "model.h"`
# outside ra_perf; this also refuses what a path would reach regardless
# ("perf/model.h", "../comm/perf/model.h"). Fails naming the file and the
# header.
file(GLOB perf_headers RELATIVE ${RA_SOURCE}/comm/perf
     ${RA_SOURCE}/comm/perf/*.h)
file(GLOB sim_headers RELATIVE ${RA_SOURCE}/comm/sim ${RA_SOURCE}/comm/sim/*.h)
file(GLOB call_path ${RA_SOURCE}/engine/*.[ch] ${RA_SOURCE}/comm/*.[ch]
     ${RA_SOURCE}/io/*.[ch])
foreach(f ${call_path})
  file(STRINGS ${f} includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line ${includes})
    string(REGEX REPLACE "^[^\"]*\"([^\"]*)\".*" "\\1" target "${line}")
    get_filename_component(name ${target} NAME)
    list(FIND perf_headers ${name} found)
    list(FIND sim_headers ${name} found_sim)
    file(RELATIVE_PATH rel ${RA_SOURCE} ${f})
    if(target MATCHES "(^|/)perf/" OR found GREATER -1)
      message(FATAL_ERROR "layering: ${rel} includes \"${target}\" of the "
              "planning unit comm/perf/, which the call path may not use "
              "(docs/DESIGN.md, \"Layers\")")
    elseif(target MATCHES "(^|/)sim/" OR found_sim GREATER -1)
      message(FATAL_ERROR "layering: ${rel} includes \"${target}\" of "
              "comm/sim/, the simulated build's own, which the call path "
              "may not use (docs/DESIGN.md, \"The simulated build\")")
    endif()
  endforeach()
endforeach()
file(WRITE ${RA_STAMP} "call path free of comm/perf/ and comm/sim/\n")

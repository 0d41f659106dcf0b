# Writes generated/fp4moe_build_info.h (from build_info.h.in) with the commit of the source tree NOW.
# Run at configure time and, through the fp4moe_build_info target, at every build: benchmark records
# and qualification verdicts (whose cache key holds the commit) must name the code the binary was built
# from, also after a `git pull` and an incremental build. configure_file rewrites the header only when
# its text changes, so an unchanged commit rebuilds nothing.
# Inputs (-D): FP4MOE_SOURCE_DIR, FP4MOE_BUILD_INFO_OUT, PROJECT_VERSION, CMAKE_BUILD_TYPE,
# FP4MOE_CUDA_ARCHS, CMAKE_CXX_COMPILER_ID, CMAKE_CXX_COMPILER_VERSION, CMAKE_CUDA_COMPILER_VERSION.
if(DEFINED ENV{FP4MOE_GIT_COMMIT} AND NOT "$ENV{FP4MOE_GIT_COMMIT}" STREQUAL "")
  set(FP4MOE_GIT_COMMIT "$ENV{FP4MOE_GIT_COMMIT}")  # a copy of the tree without .git
else()
  execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${FP4MOE_SOURCE_DIR}
                  OUTPUT_VARIABLE FP4MOE_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                  RESULT_VARIABLE _git_status)
  if(NOT _git_status EQUAL 0 OR FP4MOE_GIT_COMMIT STREQUAL "")
    set(FP4MOE_GIT_COMMIT "unknown")
  else()
    # Uncommitted changes to tracked files: the commit alone does not name this code; a hash of the
    # diff tells one set of changes from another (verdicts qualified on one are not reused for the next).
    execute_process(COMMAND git diff HEAD WORKING_DIRECTORY ${FP4MOE_SOURCE_DIR}
                    OUTPUT_VARIABLE _git_diff ERROR_QUIET)
    if(NOT _git_diff STREQUAL "")
      string(SHA256 _diff_hash "${_git_diff}")
      string(SUBSTRING "${_diff_hash}" 0 8 _diff_hash)
      set(FP4MOE_GIT_COMMIT "${FP4MOE_GIT_COMMIT}+dirty.${_diff_hash}")
    endif()
  endif()
endif()
configure_file(${FP4MOE_SOURCE_DIR}/cmake/build_info.h.in ${FP4MOE_BUILD_INFO_OUT} @ONLY)

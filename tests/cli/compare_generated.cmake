# Runs a generator script into OUT and fails unless OUT equals the COMMITTED file (ctest -P helper).
# Variables: PYTHON, GENERATOR, COMMITTED, OUT.
execute_process(COMMAND ${PYTHON} ${GENERATOR} ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${GENERATOR} failed (${rc})")
endif()
file(READ ${COMMITTED} committed)
file(READ ${OUT} generated)
if(NOT committed STREQUAL generated)
  message(FATAL_ERROR "${COMMITTED} differs from what ${GENERATOR} writes: regenerate it")
endif()

# Run at build time: writes generated/version.cpp with the git commit and dirty flag of the
# source tree (only touched when they change, so nothing rebuilds needlessly).
execute_process(COMMAND git -C ${SRC} rev-parse --short=12 HEAD OUTPUT_VARIABLE commit
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  set(commit "unknown")
endif()
execute_process(COMMAND git -C ${SRC} status --porcelain --untracked-files=no
                OUTPUT_VARIABLE status ERROR_QUIET)
if(status)
  set(dirty true)
else()
  set(dirty false)
endif()
file(WRITE ${OUT}.tmp "// Generated at build time by cmake/gen_version.cmake.\n#include \"core/version.h\"\nnamespace amptune {\nconst char* const kVersion = \"${VERSION}\";\nconst char* const kGitCommit = \"${commit}\";\nconst bool kGitDirty = ${dirty};\n}\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)

# Writes OUT (kmproxy.1.gz): the man page, by help2man from `kmproxy --help` and `--version`, with a
# COMMANDS section holding every command's own --help (the commands are read from the top-level
# --help, so a new command shows up without editing this).  Run at build time (cmake -P).
execute_process(COMMAND ${KMPROXY} --help OUTPUT_VARIABLE top RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "manpage: ${KMPROXY} --help exited ${rc}")
endif()
string(REGEX MATCH "\ncommands:\n(.*)\n\n" _ "${top}")
string(REGEX MATCHALL "\n  ([a-z]+)" lines "\n${CMAKE_MATCH_1}")
set(roff "[COMMANDS]\nEach command describes itself with \\fBkmproxy\\fR \\fIcommand\\fR \\fB\\-\\-help\\fR:\n")
foreach(line ${lines})
  string(STRIP "${line}" cmd)
  execute_process(COMMAND ${KMPROXY} ${cmd} --help OUTPUT_VARIABLE help RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "manpage: ${KMPROXY} ${cmd} --help exited ${rc}")
  endif()
  # the help names files by their place in the source tree; the page names where the package puts them
  string(REPLACE "deploy/kmproxy.properties.example" "/etc/kmproxy/kmproxy.properties.example" help "${help}")
  string(REGEX REPLACE "(^|[^/a-z])docs/([a-z0-9_-]+\\.md)" "\\1/usr/share/doc/kmproxy/\\2" help "${help}")
  # roff: a backslash is \e, a line starting with . or ' would be a request
  string(REPLACE "\\" "\\e" help "${help}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" help "${help}")
  string(APPEND roff ".SS \"kmproxy ${cmd}\"\n.nf\n${help}.fi\n")
endforeach()
# --version's first line names the page; the rest (commit, Kafka versions) gets its own section
execute_process(COMMAND ${KMPROXY} --version OUTPUT_VARIABLE version RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "manpage: ${KMPROXY} --version exited ${rc}")
endif()
string(FIND "${version}" "\n" eol)
string(SUBSTRING "${version}" 0 ${eol} version_line)
math(EXPR eol "${eol} + 1")
string(SUBSTRING "${version}" ${eol} -1 version_rest)
string(REPLACE "\\" "\\e" version_rest "${version_rest}")
string(APPEND roff "[VERSIONS]\n.nf\n${version_rest}.fi\n")
string(APPEND roff "[FILES]\n.TP\n/etc/kmproxy/kmproxy.properties\nthe daemon's configuration (\\fBkmproxy run\\fR, kmproxy.service); "
                   "/etc/kmproxy/kmproxy.properties.example lists every key\n"
                   ".TP\n/etc/kmproxy/\\fIname\\fR.properties\none instance of kmproxy@\\fIname\\fR.service\n")
file(WRITE ${OUT}.include "${roff}")
execute_process(COMMAND ${HELP2MAN} --no-info --no-discard-stderr --section=1 --include=${OUT}.include
                        "--name=keeps ZooKeeper and ZK-mode Kafka brokers in step with KRaft during a migration"
                        "--version-string=${version_line}" --output=${OUT}.tmp ${KMPROXY} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "manpage: help2man failed (${rc})")
endif()
execute_process(COMMAND ${GZIP} -9nf ${OUT}.tmp RESULT_VARIABLE rc)  # -n: no timestamp, reproducible
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "manpage: gzip failed (${rc})")
endif()
file(RENAME ${OUT}.tmp.gz ${OUT})

# Installation and the Debian package (`make package`: CPack's DEB generator).
#   /usr/bin/kmproxy, /usr/lib/systemd/system/kmproxy{,@}.service, /etc/kmproxy/kmproxy.properties.example,
#   /usr/share/man/man1/kmproxy.1.gz, /usr/share/doc/kmproxy/ (README, docs/*.md, copyright, changelog.gz),
#   /usr/share/kmproxy/{prometheus,grafana}/; postinst adds the `kmproxy` system user and /var/log/kmproxy.
# The package's version and maintainer come from the newest entry of deploy/debian/changelog, which
# must name this project's version (checked here and by tests/package/test_package.sh).
include(GNUInstallDirs)
install(TARGETS kmproxy RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The units name /usr/bin/kmproxy, the package's path; an install elsewhere (`make install` into
# /usr/local) gets its own binary's path written in at install time.
foreach(unit kmproxy.service kmproxy@.service)
  install(CODE "
    file(READ \"${CMAKE_SOURCE_DIR}/deploy/${unit}\" text)
    string(REPLACE \"/usr/bin/kmproxy\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/kmproxy\" text \"\${text}\")
    file(WRITE \"${CMAKE_BINARY_DIR}/units/${unit}\" \"\${text}\")")
  install(FILES ${CMAKE_BINARY_DIR}/units/${unit} DESTINATION lib/systemd/system)
endforeach()
# /etc, not <prefix>/etc: where the units look for the configuration
install(FILES deploy/kmproxy.properties.example DESTINATION /etc/kmproxy)
install(FILES README.md deploy/debian/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The operator's documents, which kmproxy(1) names by their installed path (cmake/manpage.cmake)
file(GLOB KM_DOCS ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES ${KM_DOCS} DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The alert rules (with their unit tests, for promtool test rules) and the Grafana dashboard
install(FILES deploy/prometheus/kmproxy-rules.yml deploy/prometheus/kmproxy-rules.test.yml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/kmproxy/prometheus)
install(FILES deploy/grafana/kmproxy-dashboard.json DESTINATION ${CMAKE_INSTALL_DATADIR}/kmproxy/grafana)

# Debian's changelog, compressed as policy wants it (gzip -9n: reproducible, no timestamp)
file(STRINGS ${CMAKE_SOURCE_DIR}/deploy/debian/changelog KM_CHANGELOG_HEAD LIMIT_COUNT 1)
string(REGEX MATCH "^kmproxy \\(([^)]+)\\)" _ "${KM_CHANGELOG_HEAD}")
if(NOT CMAKE_MATCH_1 STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "deploy/debian/changelog's newest entry is '${CMAKE_MATCH_1}', the project is "
                      "${PROJECT_VERSION}: add an entry for this version")
endif()
file(STRINGS ${CMAKE_SOURCE_DIR}/deploy/debian/changelog KM_CHANGELOG_TRAILER REGEX "^ -- " LIMIT_COUNT 1)
string(REGEX MATCH "^ -- (.+>)  " _ "${KM_CHANGELOG_TRAILER}")
set(KM_PACKAGE_MAINTAINER "${CMAKE_MATCH_1}")
find_program(KM_GZIP gzip REQUIRED)
# made when CMake configures (and again when the changelog changes): no target for cpack to miss
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/deploy/debian/changelog)
execute_process(COMMAND ${KM_GZIP} -9nc ${CMAKE_SOURCE_DIR}/deploy/debian/changelog
                OUTPUT_FILE ${CMAKE_BINARY_DIR}/changelog.gz COMMAND_ERROR_IS_FATAL ANY)
install(FILES ${CMAKE_BINARY_DIR}/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})

# kmproxy(1) from the commands' --help (help2man), rebuilt with the binary.  Without help2man the
# build goes on without a man page (`make package` then says so).
find_program(KM_HELP2MAN help2man)
if(KM_HELP2MAN AND KM_GZIP)
  set(KM_MANPAGE ${CMAKE_BINARY_DIR}/kmproxy.1.gz)
  add_custom_command(OUTPUT ${KM_MANPAGE}
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=0
            ${CMAKE_COMMAND} -DKMPROXY=$<TARGET_FILE:kmproxy> -DHELP2MAN=${KM_HELP2MAN} -DGZIP=${KM_GZIP}
            -DOUT=${KM_MANPAGE} -P ${CMAKE_SOURCE_DIR}/cmake/manpage.cmake
    DEPENDS kmproxy ${CMAKE_SOURCE_DIR}/cmake/manpage.cmake
    COMMENT "Generating kmproxy(1) with help2man" VERBATIM)
  add_custom_target(kmproxy_man ALL DEPENDS ${KM_MANPAGE})
  install(FILES ${KM_MANPAGE} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "help2man or gzip not found: no man page (deploy/install-deps.sh installs help2man)")
  install(CODE "message(WARNING \"no man page: help2man was not found when this tree was configured\")")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kmproxy)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${KM_PACKAGE_MAINTAINER}")
# Debian's limits: a synopsis under 80 characters, description lines of at most 80
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "keeps ZooKeeper-mode Kafka brokers in step with KRaft in a migration")
set(CPACK_PACKAGE_DESCRIPTION "During a ZooKeeper to KRaft migration (KIP-866) kmproxy reads the KRaft
metadata log, mirrors it into ZooKeeper in Kafka's own formats and sends the
ZooKeeper-mode brokers the controller requests Kafka 3.9's controller would.
It runs as kmproxy.service (or kmproxy@NAME.service) with its configuration
in /etc/kmproxy/kmproxy.properties.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)            # kmproxy_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)             # Depends from the libraries the binary links (dpkg-shlibdeps)
# The ZooKeeper client is linked statically with Cyrus SASL (deploy/zookeeper-c): its mechanisms are plugins,
# which dpkg-shlibdeps cannot see: DIGEST-MD5 comes with libsasl2-modules, Kerberos with the GSSAPI one.
# postinst: adduser (useradd under DPKG_ROOT, from passwd).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, passwd, libsasl2-modules")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libsasl2-modules-gssapi-mit")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/deploy/debian/postinst ${CMAKE_SOURCE_DIR}/deploy/debian/prerm
    ${CMAKE_SOURCE_DIR}/deploy/debian/postrm
    ${CMAKE_SOURCE_DIR}/deploy/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)

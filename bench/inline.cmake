# bench/inline.cmake: Produce through the inline proxy vs straight to the upstream (librdkafka's
# mock broker) vs haproxy in TCP mode, in one run: MB/s and CPU seconds per GB with 1 and 2 workers,
# plaintext and TLS-terminated; added p50/p99; resident memory at 1,000 connections (issue 21 part 3).
add_executable(bench_inline ${CMAKE_CURRENT_SOURCE_DIR}/bench_inline.c ${CMAKE_CURRENT_SOURCE_DIR}/bench_util.c)
target_link_libraries(bench_inline PRIVATE km_testsupport km_protocol PkgConfig::RDKAFKA PkgConfig::OPENSSL)
add_dependencies(bench_inline kmproxy)
add_dependencies(benches bench_inline)

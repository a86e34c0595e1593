# bench/inline.cmake: Produce through the inline proxy vs straight to the upstream (librdkafka's
# mock broker) vs haproxy in TCP mode, in one run; resident memory at 1,000 connections.
add_executable(bench_inline ${CMAKE_CURRENT_SOURCE_DIR}/bench_inline.c ${CMAKE_CURRENT_SOURCE_DIR}/bench_util.c)
target_link_libraries(bench_inline PRIVATE km_testsupport km_protocol PkgConfig::RDKAFKA)
add_dependencies(bench_inline kmproxy)
add_dependencies(benches bench_inline)

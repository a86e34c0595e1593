# bench/metalog.cmake: km_metalog read throughput against plain read() of the same files.
add_executable(bench_metalog ${CMAKE_CURRENT_SOURCE_DIR}/bench_metalog.c ${CMAKE_CURRENT_SOURCE_DIR}/bench_util.c)
target_link_libraries(bench_metalog PRIVATE km_protocol)
add_dependencies(benches bench_metalog)

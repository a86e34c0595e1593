# bench/image.cmake: a 1M-partition metadata image: bytes/partition and records/s against plain read().
add_executable(bench_image ${CMAKE_CURRENT_SOURCE_DIR}/bench_image.c ${CMAKE_CURRENT_SOURCE_DIR}/bench_util.c)
target_link_libraries(bench_image PRIVATE km_protocol)
add_dependencies(benches bench_image)

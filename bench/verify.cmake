# bench/verify.cmake: the continuous check's cost per cycle on 10,000 partitions, every partition at once (the
# baseline) against verify.partitions.per.cycle=1000 slices, one broker played by tests/verify's fake broker.
add_executable(bench_verify ${CMAKE_CURRENT_SOURCE_DIR}/bench_verify.c ${CMAKE_CURRENT_SOURCE_DIR}/bench_util.c
               ${CMAKE_SOURCE_DIR}/tests/verify/verify_fakebroker.c)
target_include_directories(bench_verify PRIVATE ${CMAKE_SOURCE_DIR}/tests/verify)
target_link_libraries(bench_verify PRIVATE km_testsupport)
add_dependencies(benches bench_verify)

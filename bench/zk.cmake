# bench/zk.cmake: full-sync znodes/s for a 100,000-partition image against the raw C client's
# pipelined zoo_amulti of the same ops, on the same ZooKeeper in the same run.
add_executable(bench_zk ${CMAKE_CURRENT_SOURCE_DIR}/bench_zk.c)
target_link_libraries(bench_zk PRIVATE km_testsupport)
add_dependencies(benches bench_zk)

# bench/broker.cmake: record appended -> every simulated ZK-mode broker acked, p50/p99 over 10,000
# leader changes with 5 brokers, then 2,000 with a real ZooKeeper written first (Kafka's order), against
# the loopback TCP round trip measured in the same run.
add_executable(bench_broker ${CMAKE_CURRENT_SOURCE_DIR}/bench_broker.c ${CMAKE_CURRENT_SOURCE_DIR}/bench_util.c
               ${CMAKE_SOURCE_DIR}/tests/test_broker_rig.c ${CMAKE_SOURCE_DIR}/tests/test_broker_check.c)
target_include_directories(bench_broker PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(bench_broker PRIVATE km_brokersim km_testsupport)
add_dependencies(benches bench_broker)

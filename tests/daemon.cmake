# The daemon: configuration, wiring of log -> image -> ZooKeeper/brokers, the demo.
km_add_test(test_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/daemon/test_config.c)
km_add_test(test_metrics SOURCES ${CMAKE_CURRENT_LIST_DIR}/daemon/test_metrics.c)
target_link_libraries(test_metrics PRIVATE pthread)

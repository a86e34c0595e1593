# The daemon: configuration, wiring of log -> image -> ZooKeeper/brokers, the demo.
km_add_test(test_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/daemon/test_config.c)
km_add_test(test_metrics SOURCES ${CMAKE_CURRENT_LIST_DIR}/daemon/test_metrics.c)
target_link_libraries(test_metrics PRIVATE pthread)
# The product end to end, as `make demo-embedded` runs it: real ZooKeeper, simulated brokers, live changes.
km_add_test(test_demo SOURCES ${CMAKE_CURRENT_LIST_DIR}/daemon/test_demo.c TIMEOUT 300)
add_dependencies(test_demo kmproxy-brokersim)
km_add_test(test_daemon SOURCES ${CMAKE_CURRENT_LIST_DIR}/daemon/test_daemon.c TIMEOUT 300)
# The daemon to TLS and SASL_SSL brokers (simulated) with a real ZooKeeper.
km_add_test(test_daemon_secure SOURCES ${CMAKE_CURRENT_LIST_DIR}/daemon/test_daemon_secure.c
            ${CMAKE_CURRENT_LIST_DIR}/test_tls_certs.c TIMEOUT 300)
target_link_libraries(test_daemon_secure PRIVATE km_brokersim)

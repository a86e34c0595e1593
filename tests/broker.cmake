# tests/broker.cmake: ZK-mode broker channels, the propagator and the broker simulator.
set(KM_BROKER_TESTS ${CMAKE_CURRENT_LIST_DIR})
add_subdirectory(${KM_BROKER_TESTS}/brokersim ${CMAKE_BINARY_DIR}/tests/brokersim)
km_add_test(test_broker_sim SOURCES ${KM_BROKER_TESTS}/test_broker_sim.c ${KM_BROKER_TESTS}/test_broker_client.c)
target_link_libraries(test_broker_sim PRIVATE km_brokersim)
km_add_test(test_broker_build SOURCES ${KM_BROKER_TESTS}/test_broker_build.c ${KM_BROKER_TESTS}/test_broker_client.c)
target_link_libraries(test_broker_build PRIVATE km_brokersim)
km_add_test(test_broker_e2e SOURCES ${KM_BROKER_TESTS}/test_broker_e2e.c ${KM_BROKER_TESTS}/test_broker_rig.c
            ${KM_BROKER_TESTS}/test_broker_check.c TIMEOUT 600)
target_link_libraries(test_broker_e2e PRIVATE km_brokersim)
km_add_test(test_broker_capture SOURCES ${KM_BROKER_TESTS}/test_broker_capture.c ${KM_BROKER_TESTS}/test_broker_rig.c
            ${KM_BROKER_TESTS}/test_broker_check.c)
target_link_libraries(test_broker_capture PRIVATE km_brokersim)
km_add_test(test_broker_zk SOURCES ${KM_BROKER_TESTS}/test_broker_zk.c ${KM_BROKER_TESTS}/test_broker_rig.c
            ${KM_BROKER_TESTS}/test_broker_check.c TIMEOUT 600)
target_link_libraries(test_broker_zk PRIVATE km_brokersim)
km_add_test(test_broker_simexe SOURCES ${KM_BROKER_TESTS}/test_broker_simexe.c ${KM_BROKER_TESTS}/test_broker_client.c)
target_compile_definitions(test_broker_simexe PRIVATE KM_BSIM_BINARY="$<TARGET_FILE:kmproxy-brokersim>")
add_dependencies(test_broker_simexe kmproxy-brokersim)
km_add_test(test_broker_chan SOURCES ${KM_BROKER_TESTS}/test_broker_chan.c ${KM_BROKER_TESTS}/test_broker_rig.c
            ${KM_BROKER_TESTS}/test_broker_check.c ${KM_BROKER_TESTS}/test_tls_certs.c)
target_link_libraries(test_broker_chan PRIVATE km_brokersim)
set(KM_BROKER_DRIG ${KM_BROKER_TESTS}/test_broker_drig.c ${KM_BROKER_TESTS}/test_broker_rig.c
    ${KM_BROKER_TESTS}/test_broker_check.c ${KM_BROKER_TESTS}/test_tls_certs.c)
km_add_test(test_broker_daemon SOURCES ${KM_BROKER_TESTS}/test_broker_daemon.c ${KM_BROKER_DRIG} TIMEOUT 600)
target_link_libraries(test_broker_daemon PRIVATE km_brokersim km_daemon)
# Each of issue 9's defects through the daemon: stops, resends, STALE_BROKER_EPOCH, a re-created
# topic, client.id and the default listener.
km_add_test(test_broker_daemon_rpcs SOURCES ${KM_BROKER_TESTS}/test_broker_daemon_rpcs.c ${KM_BROKER_DRIG} TIMEOUT 600)
target_link_libraries(test_broker_daemon_rpcs PRIVATE km_brokersim km_daemon)
# Issue 27: a ZooKeeper session expiry during dual-write, with deltas throughout, with and without HA.
km_add_test(test_broker_expiry SOURCES ${KM_BROKER_TESTS}/test_broker_expiry.c ${KM_BROKER_DRIG} TIMEOUT 600)
target_link_libraries(test_broker_expiry PRIVATE km_brokersim km_daemon)
# Secured listeners: SASL mechanisms over PLAINTEXT and TLS, refusals, the authorizer, limits.
km_add_test(test_broker_sasl SOURCES ${KM_BROKER_TESTS}/test_broker_sasl.c ${KM_BROKER_TESTS}/test_tls_certs.c
            ${KM_BROKER_TESTS}/test_broker_rig.c ${KM_BROKER_TESTS}/test_broker_check.c
            ${KM_BROKER_TESTS}/test_broker_client.c)
target_link_libraries(test_broker_sasl PRIVATE km_brokersim)

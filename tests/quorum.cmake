# tests/quorum.cmake: the KRaft observer (proxy/quorum) against the raft simulator (tests/raftsim).
set(KM_QUORUM_TESTS ${CMAKE_CURRENT_LIST_DIR})
add_subdirectory(${KM_QUORUM_TESTS}/raftsim ${CMAKE_BINARY_DIR}/tests/raftsim)
km_add_test(test_quorum_fetch SOURCES ${KM_QUORUM_TESTS}/test_quorum_fetch.c ${KM_QUORUM_TESTS}/test_quorum_util.c
            ${KM_QUORUM_TESTS}/test_tls_certs.c)
target_link_libraries(test_quorum_fetch PRIVATE km_raftsim km_quorum)
km_add_test(test_quorum_faults SOURCES ${KM_QUORUM_TESTS}/test_quorum_faults.c ${KM_QUORUM_TESTS}/test_quorum_util.c)
target_link_libraries(test_quorum_faults PRIVATE km_raftsim km_quorum)
km_add_test(test_quorum_sasl SOURCES ${KM_QUORUM_TESTS}/test_quorum_sasl.c ${KM_QUORUM_TESTS}/test_quorum_util.c)
target_link_libraries(test_quorum_sasl PRIVATE km_raftsim km_quorum)
km_add_test(test_quorum_cli SOURCES ${KM_QUORUM_TESTS}/test_quorum_cli.c ${KM_QUORUM_TESTS}/test_quorum_util.c
            ${KM_QUORUM_TESTS}/test_tls_certs.c)
target_link_libraries(test_quorum_cli PRIVATE km_raftsim km_quorum)
km_add_test(test_quorum_daemon SOURCES ${KM_QUORUM_TESTS}/test_quorum_daemon.c ${KM_QUORUM_TESTS}/test_quorum_util.c
            ${KM_QUORUM_TESTS}/test_tls_certs.c TIMEOUT 300)
target_link_libraries(test_quorum_daemon PRIVATE km_raftsim km_quorum)
add_dependencies(test_quorum_cli kmproxy-raftsim kmproxy-brokersim)
set_tests_properties(test_quorum_cli PROPERTIES TIMEOUT 300)
km_add_test(test_quorum_brokers SOURCES ${KM_QUORUM_TESTS}/test_quorum_brokers.c ${KM_QUORUM_TESTS}/test_quorum_util.c
            ${KM_QUORUM_TESTS}/test_broker_rig.c ${KM_QUORUM_TESTS}/test_broker_check.c)
target_link_libraries(test_quorum_brokers PRIVATE km_raftsim km_quorum km_brokersim)
km_add_test(test_quorum_run SOURCES ${KM_QUORUM_TESTS}/test_quorum_run.c ${KM_QUORUM_TESTS}/test_quorum_util.c
            TIMEOUT 300)
target_link_libraries(test_quorum_run PRIVATE km_raftsim km_quorum)
km_add_test(test_quorum_memlog SOURCES ${KM_QUORUM_TESTS}/test_quorum_memlog.c ${KM_QUORUM_TESTS}/test_quorum_util.c)
target_link_libraries(test_quorum_memlog PRIVATE km_raftsim km_quorum)
# The same observer scenarios against Kafka's own leader (../shared/realkafka bin/raft-leader); skips without it.
km_add_test(test_quorum_real SOURCES ${KM_QUORUM_TESTS}/test_quorum_real.c ${KM_QUORUM_TESTS}/test_quorum_real_util.c
            ${KM_QUORUM_TESTS}/ops/ops_util.c ${KM_QUORUM_TESTS}/test_quorum_util.c TIMEOUT 400)
target_include_directories(test_quorum_real PRIVATE ${KM_QUORUM_TESTS}/ops)
target_link_libraries(test_quorum_real PRIVATE km_raftsim km_quorum)
# /readyz, metrics and log of a quorum-mode daemon while the quorum fails (issue 18 items 2, 5).
km_add_test(test_quorum_health SOURCES ${KM_QUORUM_TESTS}/test_quorum_health.c ${KM_QUORUM_TESTS}/test_quorum_util.c
            TIMEOUT 300)
target_link_libraries(test_quorum_health PRIVATE km_raftsim km_quorum)
# HA: a delta read in the loop turn that fences the writer, before the step-down runs (issue 27 item 1).
km_add_test(test_quorum_stepdown SOURCES ${KM_QUORUM_TESTS}/test_quorum_stepdown.c ${KM_QUORUM_TESTS}/test_quorum_util.c
            TIMEOUT 300)
target_link_libraries(test_quorum_stepdown PRIVATE km_raftsim km_quorum)

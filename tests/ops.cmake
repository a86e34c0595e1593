# Operations: the CLI as an operator meets it (help, strict options, unreachable ZooKeeper, signals),
# and the daemon's health endpoints and signal handling.
set(KM_OPS_TESTS ${CMAKE_CURRENT_LIST_DIR}/ops)
km_add_test(test_cli_help SOURCES ${KM_OPS_TESTS}/test_cli_help.c)
# `make bench` from a fresh clone: the generated runner is executable (run-benches.in has no run bit).
add_test(NAME bench_runner_executable COMMAND test -x ${CMAKE_BINARY_DIR}/bench/run-benches)
km_add_test(test_cli_zk SOURCES ${KM_OPS_TESTS}/test_cli_zk.c ${KM_OPS_TESTS}/ops_daemon.c ${KM_OPS_TESTS}/ops_util.c TIMEOUT 300)
km_add_test(test_daemon_health SOURCES ${KM_OPS_TESTS}/test_daemon_health.c ${KM_OPS_TESTS}/ops_daemon.c ${KM_OPS_TESTS}/ops_util.c TIMEOUT 600)
# HA: instances as processes, the broker simulators in the test (tests/test_broker_rig.c generates the log).
km_add_test(test_ha SOURCES ${KM_OPS_TESTS}/test_ha.c ${KM_OPS_TESTS}/ops_daemon.c ${KM_OPS_TESTS}/ops_util.c
            ${CMAKE_CURRENT_LIST_DIR}/test_broker_rig.c ${CMAKE_CURRENT_LIST_DIR}/test_broker_check.c TIMEOUT 900)
target_link_libraries(test_ha PRIVATE km_brokersim)
target_include_directories(test_ha PRIVATE ${CMAKE_CURRENT_LIST_DIR})
# The whole HA suite again on a ZooKeeper that requires SASL, every instance on zookeeper.set.acl=true.
km_add_test_env(test_ha_sasl test_ha KM_TEST_ZK_SECURE=sasl)
km_add_test(test_daemon_tls SOURCES ${KM_OPS_TESTS}/test_daemon_tls.c ${KM_OPS_TESTS}/ops_daemon.c ${KM_OPS_TESTS}/ops_util.c
            ${CMAKE_CURRENT_LIST_DIR}/test_broker_rig.c ${CMAKE_CURRENT_LIST_DIR}/test_broker_check.c
            ${CMAKE_CURRENT_LIST_DIR}/test_tls_certs.c TIMEOUT 300)
target_link_libraries(test_daemon_tls PRIVATE km_brokersim)
target_include_directories(test_daemon_tls PRIVATE ${CMAKE_CURRENT_LIST_DIR})
# The fault suite (issue 18): readiness under injected faults, with the brokers simulated in the test.
km_add_test(test_faults SOURCES ${KM_OPS_TESTS}/test_faults.c ${KM_OPS_TESTS}/ops_daemon.c ${KM_OPS_TESTS}/ops_util.c
            ${CMAKE_CURRENT_LIST_DIR}/test_broker_rig.c ${CMAKE_CURRENT_LIST_DIR}/test_broker_check.c
            ${CMAKE_CURRENT_LIST_DIR}/test_tls_certs.c TIMEOUT 600)
target_link_libraries(test_faults PRIVATE km_brokersim)
target_include_directories(test_faults PRIVATE ${CMAKE_CURRENT_LIST_DIR})
# kmproxy status: a daemon process following the raft simulator, with broker simulators and a real ZooKeeper.
km_add_test(test_cli_status SOURCES ${KM_OPS_TESTS}/test_cli_status.c ${KM_OPS_TESTS}/ops_daemon.c ${KM_OPS_TESTS}/ops_util.c
            ${CMAKE_CURRENT_LIST_DIR}/test_broker_rig.c ${CMAKE_CURRENT_LIST_DIR}/test_broker_check.c TIMEOUT 300)
target_link_libraries(test_cli_status PRIVATE km_brokersim km_raftsim)
target_include_directories(test_cli_status PRIVATE ${CMAKE_CURRENT_LIST_DIR})
# A single daemon restarted (SIGTERM, kill -9) claims over its own standing claim; someone else's is refused.
km_add_test(test_daemon_restart SOURCES ${KM_OPS_TESTS}/test_daemon_restart.c ${KM_OPS_TESTS}/ops_daemon.c ${KM_OPS_TESTS}/ops_util.c TIMEOUT 300)
# The health port under siege: idle and slow connections never starve /healthz and /readyz; POST guarded.
km_add_test(test_health_port SOURCES ${KM_OPS_TESTS}/test_health_port.c ${KM_OPS_TESTS}/ops_daemon.c ${KM_OPS_TESTS}/ops_util.c TIMEOUT 300)
# SIGHUP with an edited --config file: changed keys named as needing a restart, log.file applied.
km_add_test(test_daemon_sighup SOURCES ${KM_OPS_TESTS}/test_daemon_sighup.c ${KM_OPS_TESTS}/ops_daemon.c ${KM_OPS_TESTS}/ops_util.c TIMEOUT 240)

# tests/zk.cmake: zkbridge against real ZooKeeper servers (tests/support/zkserver.c) and the
# fault-injecting proxy (tests/support/faultproxy.c).
set(KM_ZK_TESTS ${CMAKE_CURRENT_LIST_DIR})
km_add_test(test_zk_writer SOURCES ${KM_ZK_TESTS}/test_zk_writer.c ${KM_ZK_TESTS}/test_zk_util.c TIMEOUT 900)
km_add_test(test_zk_faults SOURCES ${KM_ZK_TESTS}/test_zk_faults.c ${KM_ZK_TESTS}/test_zk_util.c TIMEOUT 900)
km_add_test(test_zk_sync SOURCES ${KM_ZK_TESTS}/test_zk_sync.c ${KM_ZK_TESTS}/test_zk_util.c TIMEOUT 900)
# Alone and one test at a time: its 3-server ensemble with a paused follower must not compete for the
# two cores with other ZooKeeper JVMs (under ASan a starved quorum looked like a wedged writer).
km_add_test(test_zk_chaos SOURCES ${KM_ZK_TESTS}/test_zk_chaos.c ${KM_ZK_TESTS}/test_zk_util.c
            ${KM_ZK_TESTS}/test_tls_certs.c TIMEOUT 900
            SERIAL JOBS 1)
# The whole chaos suite again on a ZooKeeper that requires SASL, with Kafka's ACLs (tests/support/zksecmode.h).
km_add_test_env(test_zk_chaos_sasl test_zk_chaos KM_TEST_ZK_SECURE=sasl)
km_add_test(test_zk_guard SOURCES ${KM_ZK_TESTS}/test_zk_guard.c ${KM_ZK_TESTS}/test_zk_util.c TIMEOUT 600)
km_add_test(test_zk_fidelity SOURCES ${KM_ZK_TESTS}/test_zk_fidelity.c ${KM_ZK_TESTS}/test_zk_util.c TIMEOUT 600)
# Znodes past 512 KiB (a topic of 40,000 partitions, 6,000 ACLs on one resource) and a server whose
# jute.maxbuffer is smaller than one of them.
km_add_test(test_zk_large SOURCES ${KM_ZK_TESTS}/test_zk_large.c ${KM_ZK_TESTS}/test_zk_util.c TIMEOUT 1800)

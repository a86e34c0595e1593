# tests/verify.cmake: `kmproxy verify`, the broker-state verifier (issue 26 part 3; proxy/verify/).
# test_verify_realcluster runs it against a real Kafka 3.9 cluster in migration (tests/realcluster/, rc_rig.h):
# one worker, as test_realcluster (each test starts its own cluster of JVMs).
if(KM_REALCLUSTER_TESTS)  # tests/CMakeLists.txt: the plain build runs it
  set(KM_VF_RC_DIR ${CMAKE_CURRENT_LIST_DIR}/realcluster)
  km_add_test(test_verify_realcluster SOURCES ${KM_VF_RC_DIR}/test_verify.c ${KM_VF_RC_DIR}/rc_rig.c TIMEOUT 2400 JOBS 1)
  target_include_directories(test_verify_realcluster PRIVATE ${KM_VF_RC_DIR})
  set_tests_properties(test_verify_realcluster PROPERTIES RESOURCE_LOCK km_realcluster)
endif()
# test_verify_fake: what the real cluster does not do on demand (malformed answers, silence), and usage.
km_add_test(test_verify_fake SOURCES ${CMAKE_CURRENT_LIST_DIR}/verify/test_verify_fake.c ${CMAKE_CURRENT_LIST_DIR}/verify/verify_fakebroker.c
            ${CMAKE_CURRENT_LIST_DIR}/test_tls_certs.c)  # a throwaway PKI for the TLS ZooKeeper
target_link_libraries(test_verify_fake PRIVATE km_verify)  # km_verify_dual_write's arithmetic, called directly
target_include_directories(test_verify_fake PRIVATE ${CMAKE_CURRENT_LIST_DIR}/verify ${CMAKE_CURRENT_LIST_DIR})
# test_verify_daemon: the daemon's continuous check (verify.interval.ms) with the fake broker and a real ZooKeeper.
km_add_test(test_verify_daemon SOURCES ${CMAKE_CURRENT_LIST_DIR}/verify/test_verify_daemon.c
            ${CMAKE_CURRENT_LIST_DIR}/verify/verify_fakebroker.c ${CMAKE_CURRENT_LIST_DIR}/ops/ops_daemon.c
            ${CMAKE_CURRENT_LIST_DIR}/ops/ops_util.c TIMEOUT 300)
target_include_directories(test_verify_daemon PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ops ${CMAKE_CURRENT_LIST_DIR}/verify)

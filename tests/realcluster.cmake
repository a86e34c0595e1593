# tests/realcluster.cmake: kmproxy beside a real Apache Kafka 3.9 cluster in ZooKeeper-to-KRaft migration
# (docs/realcluster.md): ZooKeeper, ZK-mode brokers and KRaft controllers from Kafka's released jars, fetched by
# tests/realcluster/fetch-kafka (Maven, tests/realcluster/pom.xml) into a cache and run by tests/realcluster/rig.py.
# Skips saying why without Java, Maven or python3; fails instead under CI or KM_REQUIRE_REALKAFKA=1.
# One worker: each test starts its own cluster of JVMs, and two at once on a 2-core machine only slow both.
if(NOT KM_REALCLUSTER_TESTS)
  return()  # tests/CMakeLists.txt: the plain build runs them
endif()
set(KM_RC_DIR ${CMAKE_CURRENT_LIST_DIR}/realcluster)
km_add_test(test_realcluster SOURCES ${KM_RC_DIR}/test_realcluster.c ${KM_RC_DIR}/rc_rig.c TIMEOUT 2400 JOBS 1)
target_include_directories(test_realcluster PRIVATE ${KM_RC_DIR})
set_tests_properties(test_realcluster PROPERTIES RESOURCE_LOCK km_realcluster)  # one real cluster at a time (test_verify_realcluster too)
# KAFKA-21062 on real Kafka (issue 26, docs/kafka21062.md): the controller's ZooKeeper link through
# tests/realcluster/zkfault.py, one /migration ack lost; one cluster at a time, beside no other real-cluster test.
km_add_test(test_kafka21062 SOURCES ${KM_RC_DIR}/test_kafka21062.c ${KM_RC_DIR}/rc_rig.c TIMEOUT 2400 JOBS 1)
target_include_directories(test_kafka21062 PRIVATE ${KM_RC_DIR})
set_tests_properties(test_kafka21062 PROPERTIES RESOURCE_LOCK km_realcluster)
# The round trip through Kafka's own ZooKeeper reader (issue 25 item 4, docs/realcluster.md "Round trip"): one
# ZooKeeper of the test support and one JVM, no cluster, so no RESOURCE_LOCK.
km_add_test(test_roundtrip SOURCES ${KM_RC_DIR}/test_roundtrip.c ${KM_RC_DIR}/rc_rig.c
            ${CMAKE_CURRENT_LIST_DIR}/realkafka_util.c TIMEOUT 600)
target_include_directories(test_roundtrip PRIVATE ${KM_RC_DIR} ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(test_roundtrip PRIVATE KM_TEST_BUILD_DIR="${CMAKE_BINARY_DIR}")
# The same round trip through a whole fresh KRaft controller (docs/realcluster.md "Round trip"): zk sync writes the
# rig's ZooKeeper before Kafka starts, one controller and one ZK-mode broker migrate it; real Kafka processes, so
# one real-cluster suite at a time.
km_add_test(test_roundtrip_controller SOURCES ${KM_RC_DIR}/test_roundtrip_controller.c ${KM_RC_DIR}/rc_rig.c
            ${CMAKE_CURRENT_LIST_DIR}/realkafka_util.c TIMEOUT 1200 JOBS 1)
target_include_directories(test_roundtrip_controller PRIVATE ${KM_RC_DIR} ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(test_roundtrip_controller PRIVATE KM_TEST_BUILD_DIR="${CMAKE_BINARY_DIR}")
set_tests_properties(test_roundtrip_controller PROPERTIES RESOURCE_LOCK km_realcluster)
# `make demo`'s driver end to end on the real cluster (tests/realcluster/demo.py): its all-clear, and a failing
# step and a Ctrl-C exiting non-zero with nothing left running.  One small cluster per run, one at a time.
add_test(NAME test_demo_realcluster COMMAND bash ${KM_RC_DIR}/test_demo.sh ${CMAKE_SOURCE_DIR} $<TARGET_FILE:kmproxy>)
set_tests_properties(test_demo_realcluster PROPERTIES TIMEOUT 1200 SKIP_RETURN_CODE 77 RESOURCE_LOCK km_realcluster)

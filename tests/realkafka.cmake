# tests/realkafka.cmake: kmproxy against Apache Kafka 3.9's own code in ../shared/realkafka (its README): every
# request kmproxy builds read by kafka-clients (tests/java/RequestCheck.java, compiled at test time with javac),
# and kmproxy's image and dump of every corpus and gen-coverage file against Kafka's (bin/image-oracle,
# bin/record-oracle).  The tests skip, saying why, when the kit or Java is absent.
set(KM_RK_TESTS ${CMAKE_CURRENT_LIST_DIR})
km_add_test(test_realkafka_requests SOURCES ${KM_RK_TESTS}/test_realkafka_requests.c ${KM_RK_TESTS}/realkafka_util.c
            ${KM_RK_TESTS}/test_quorum_util.c TIMEOUT 600)
target_link_libraries(test_realkafka_requests PRIVATE km_raftsim km_quorum km_broker km_sasl km_brokersim)
target_compile_definitions(test_realkafka_requests PRIVATE KM_TEST_BUILD_DIR="${CMAKE_BINARY_DIR}")
km_add_test(test_realkafka_oracles SOURCES ${KM_RK_TESTS}/test_realkafka_oracles.c ${KM_RK_TESTS}/realkafka_util.c
            TIMEOUT 900)
target_compile_definitions(test_realkafka_oracles PRIVATE KM_TEST_BUILD_DIR="${CMAKE_BINARY_DIR}")
if(KM_SANITIZE)
  target_compile_definitions(test_realkafka_oracles PRIVATE KM_TEST_SANITIZED=1)
endif()

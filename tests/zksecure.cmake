# tests/zksecure.cmake: a secured ZooKeeper (SASL DIGEST-MD5, TLS with client certificates, digest
# auth) and Kafka's znode ACLs, against real servers (tests/support/zkserver.c).
km_add_test(test_zk_secure SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_zk_secure.c ${CMAKE_CURRENT_LIST_DIR}/test_zk_util.c
            ${CMAKE_CURRENT_LIST_DIR}/test_tls_certs.c TIMEOUT 600)

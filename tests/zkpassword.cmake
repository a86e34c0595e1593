# tests/zkpassword.cmake: Kafka's PasswordEncoder (zkbridge/zk_password.c), against the JDK's crypto
# through tests/support/PasswordEncoderPeer.java (skipped when there is no java) and on its own.
km_add_test(test_zk_password SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_zk_password.c TIMEOUT 300)

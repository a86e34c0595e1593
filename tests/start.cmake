# Start-up checks (issue 18): command lines, files and hosts checked before anything runs.
set(KM_START_TESTS ${CMAKE_CURRENT_LIST_DIR}/start)
km_add_test(test_start_cli SOURCES ${KM_START_TESTS}/test_start_cli.c)
km_add_test(test_start_checks SOURCES ${KM_START_TESTS}/test_start_checks.c)
km_add_test(test_cluster_guard SOURCES ${KM_START_TESTS}/test_cluster_guard.c ${CMAKE_CURRENT_LIST_DIR}/test_quorum_util.c
            TIMEOUT 400)
target_link_libraries(test_cluster_guard PRIVATE km_raftsim km_quorum)
target_include_directories(test_cluster_guard PRIVATE ${CMAKE_CURRENT_LIST_DIR})

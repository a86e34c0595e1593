# Start-up checks (issue 18): command lines, files and hosts checked before anything runs.
set(KM_START_TESTS ${CMAKE_CURRENT_LIST_DIR}/start)
km_add_test(test_start_cli SOURCES ${KM_START_TESTS}/test_start_cli.c)
km_add_test(test_start_checks SOURCES ${KM_START_TESTS}/test_start_checks.c)
km_add_test(test_cluster_guard SOURCES ${KM_START_TESTS}/test_cluster_guard.c ${CMAKE_CURRENT_LIST_DIR}/test_quorum_util.c
            TIMEOUT 400)
target_link_libraries(test_cluster_guard PRIVATE km_raftsim km_quorum)
target_include_directories(test_cluster_guard PRIVATE ${CMAKE_CURRENT_LIST_DIR})
# A Criterion binary ctest does not run: test_hygiene runs it to see what a run leaves behind.
add_executable(hygiene_helper ${KM_START_TESTS}/hygiene_helper.c ${CMAKE_CURRENT_LIST_DIR}/support/run_dir.c)
target_link_libraries(hygiene_helper PRIVATE km_testsupport)
km_add_test(test_hygiene SOURCES ${KM_START_TESTS}/test_hygiene.c)
target_compile_definitions(test_hygiene PRIVATE KM_HYGIENE_HELPER="$<TARGET_FILE:hygiene_helper>")
add_dependencies(test_hygiene hygiene_helper)

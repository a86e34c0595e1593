# Start-up checks (issue 18): command lines, files and hosts checked before anything runs.
set(KM_START_TESTS ${CMAKE_CURRENT_LIST_DIR}/start)
km_add_test(test_start_cli SOURCES ${KM_START_TESTS}/test_start_cli.c)
km_add_test(test_start_checks SOURCES ${KM_START_TESTS}/test_start_checks.c)

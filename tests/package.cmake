# Packaging: `make package` builds a .deb that installs (into a scratch root), verifies and runs.
# Not in the ASan+UBSan tree: the package is built from the plain tree, and it tests no memory behaviour.
if(NOT KM_SANITIZE)
  add_test(NAME test_package COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/package/test_package.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(test_package PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
# kmproxy --version's commit in a checkout, a git-archive tarball and a tree with neither.
add_test(NAME test_build_info COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/package/test_build_info.sh ${CMAKE_SOURCE_DIR})
# deploy/install-deps.sh (build, package, demo) apart from deploy/install-test-deps.sh (the test toolchain).
add_test(NAME test_deps_split COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/package/test_deps_split.sh ${CMAKE_SOURCE_DIR})

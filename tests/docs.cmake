# The operator's documentation and monitoring files: generated docs are current (make docs), and the
# Prometheus rules and Grafana dashboard name only metrics kmproxy exports.
set(KM_DOCS_TESTS ${CMAKE_CURRENT_LIST_DIR}/docs)
km_add_test(test_docs_config SOURCES ${KM_DOCS_TESTS}/test_docs_config.c ${KM_DOCS_TESTS}/docs_util.c)
target_include_directories(test_docs_config PRIVATE ${KM_DOCS_TESTS})
# Scrapes a running daemon and proxy (ZooKeeper, kmproxy-raftsim as the quorum).
km_add_test(test_docs_metrics SOURCES ${KM_DOCS_TESTS}/test_docs_metrics.c ${KM_DOCS_TESTS}/docs_metrics.c
            ${KM_DOCS_TESTS}/docs_stack.c ${KM_DOCS_TESTS}/docs_util.c ${CMAKE_CURRENT_LIST_DIR}/ops/ops_daemon.c
            ${CMAKE_CURRENT_LIST_DIR}/ops/ops_util.c TIMEOUT 300)
target_include_directories(test_docs_metrics PRIVATE ${KM_DOCS_TESTS} ${CMAKE_CURRENT_LIST_DIR}/ops)
add_dependencies(test_docs_metrics kmproxy-raftsim)
# deploy/prometheus: the rules load (promtool check rules) and each alert fires exactly where its unit
# tests say (promtool test rules); Debian's prometheus package has promtool (deploy/install-deps.sh).
find_program(KM_PROMTOOL promtool)
set(KM_RULES_DIR ${CMAKE_SOURCE_DIR}/deploy/prometheus)
if(KM_PROMTOOL)
  add_test(NAME prometheus_rules_check COMMAND ${KM_PROMTOOL} check rules ${KM_RULES_DIR}/kmproxy-rules.yml)
  add_test(NAME prometheus_rules_test COMMAND ${KM_PROMTOOL} test rules kmproxy-rules.test.yml
           WORKING_DIRECTORY ${KM_RULES_DIR})
else()
  foreach(t prometheus_rules_check prometheus_rules_test grafana_dashboard_promql)
    add_test(NAME ${t} COMMAND sh -c "echo 'promtool not found: run deploy/install-deps.sh (package prometheus)'; exit 1")
  endforeach()
endif()
# Every alert's runbook_url names a section docs/runbook.md has.
add_test(NAME prometheus_rules_runbook_urls COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/docs/runbook_urls.py
         ${KM_RULES_DIR}/kmproxy-rules.yml ${CMAKE_SOURCE_DIR}/docs/runbook.md)
# Every expression of the Grafana dashboard parses as PromQL (written out as recording rules).
if(KM_PROMTOOL)
  add_test(NAME grafana_dashboard_promql COMMAND sh -c
           "python3 '${CMAKE_CURRENT_LIST_DIR}/docs/metric_names.py' --as-rules '${CMAKE_CURRENT_BINARY_DIR}/dashboard-exprs.yml' '${CMAKE_SOURCE_DIR}/deploy/grafana/kmproxy-dashboard.json' && '${KM_PROMTOOL}' check rules '${CMAKE_CURRENT_BINARY_DIR}/dashboard-exprs.yml'")
endif()

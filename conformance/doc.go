// Package conformance holds maint to the other clients' own scenario suites:
// redis-py's test_scenario/test_maint_notifications.py, node-redis's
// test-scenario e2e tests, Lettuce's io.lettuce.scenario tests and go-redis's
// maintnotifications/e2e, ported scenario by scenario with their parameters
// and pass criteria (see README.md in this directory).
//
// Every scenario triggers maintenance only through the fault injector's HTTP
// API (FaultInjector) and reads its database from an endpoints file
// (LoadEndpoints), so the same tests run against a real Redis Enterprise
// cluster (FAULT_INJECTION_API_URL and REDIS_ENDPOINTS_CONFIG_PATH set) and,
// by default, against the emulated fault injector mainttest serves.
package conformance

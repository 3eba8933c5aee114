// Package charts holds the tests of the Helm charts in this directory
// (charts/bellows): the dashboards' queries and the alert rules' expressions
// against the exported metric names, the alert rules under `promtool check
// rules` and `promtool test rules`, and `helm lint` / `helm template` of the
// chart (`make chart-test`).
package charts

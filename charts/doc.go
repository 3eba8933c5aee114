// Package charts holds the tests of the Helm charts in this directory
// (charts/bellows): the dashboards' queries against the exported metric
// names, and `helm lint` / `helm template` of the chart (`make chart-test`).
package charts

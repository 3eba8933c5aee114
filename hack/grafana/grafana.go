// Package grafana reads the PromQL out of the chart's Grafana dashboards
// (charts/bellows/dashboards): every panel target's expression and every
// query variable's selector. The chart tests check them against the
// exported metric names; the e2e suite runs them against a real Prometheus.
package grafana

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Query is one PromQL expression of a dashboard and where it is.
type Query struct{ Where, Expr string }

// IntervalVars matches Grafana's interval variables (the only variables
// that may appear outside a quoted label value).
var IntervalVars = regexp.MustCompile(`\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}`)

// labelValues matches a template variable's label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)

// Queries returns every panel target's expr (rows' nested panels too) and
// every query variable's metric selector; file names the dashboard in
// Query.Where and in errors. A query variable that is not
// label_values(selector, label) is an error.
func Queries(file string, data []byte) ([]Query, error) {
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []Query
	var walk func(raw []json.RawMessage) error
	walk = func(raw []json.RawMessage) error {
		for _, r := range raw {
			var p struct {
				Title   string            `json:"title"`
				Panels  []json.RawMessage `json:"panels"`
				Targets []struct {
					RefID string `json:"refId"`
					Expr  string `json:"expr"`
				} `json:"targets"`
			}
			if err := json.Unmarshal(r, &p); err != nil {
				return fmt.Errorf("%s: panel: %w", file, err)
			}
			for _, tg := range p.Targets {
				out = append(out, Query{fmt.Sprintf("%s: panel %q target %s", file, p.Title, tg.RefID), tg.Expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := v.Query
		if m, ok := q.(map[string]any); ok {
			q = m["query"]
		}
		s, _ := q.(string)
		m := labelValues.FindStringSubmatch(strings.TrimSpace(s))
		if m == nil {
			return nil, fmt.Errorf("%s: variable %s: query %q is not label_values(selector, label)", file, v.Name, s)
		}
		out = append(out, Query{fmt.Sprintf("%s: variable %s", file, v.Name), m[1]})
	}
	return out, nil
}

// quotedVar is a template variable as a whole quoted label value.
var quotedVar = regexp.MustCompile(`"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)"`)

// AllValues is expr as Grafana runs it with every variable at "All": each
// interval variable becomes interval, and each quoted variable ".+" (the
// dashboards match variables with =~ only; the chart tests check it).
func AllValues(expr, interval string) string {
	return quotedVar.ReplaceAllString(IntervalVars.ReplaceAllString(expr, interval), `".+"`)
}

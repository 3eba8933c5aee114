package v1alpha1

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/bellows-kv/bellows/internal/contract"
)

// rule is one x-kubernetes-validations entry of a generated CRD, with the
// path of the schema that carries it and that schema.
type rule struct {
	path              string
	schema            map[string]any
	rule, messageExpr string
}

// schemaRules walks the schema and lists every CEL rule.
func schemaRules(schema map[string]any, path string) []rule {
	var out []rule
	rules, _ := schema["x-kubernetes-validations"].([]any)
	for _, r := range rules {
		r := r.(map[string]any)
		re, _ := r["rule"].(string)
		me, _ := r["messageExpression"].(string)
		out = append(out, rule{path, schema, re, me})
	}
	props, _ := schema["properties"].(map[string]any)
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, schemaRules(props[k].(map[string]any), path+"."+k)...)
	}
	return out
}

func rulesAt(t *testing.T, file, path string) []rule {
	t.Helper()
	var out []rule
	for _, r := range schemaRules(crdSchema(t, file), "") {
		if r.path == path {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rule at %s", file, path)
	}
	return out
}

func hasRule(rules []rule, text string) bool {
	return slices.ContainsFunc(rules, func(r rule) bool { return strings.Contains(r.rule, text) })
}

// TestCRDRulesMatchTheCode: the bounds the CRD's rules hold are the ones
// the Go code holds (a marker cannot name a Go constant).
func TestCRDRulesMatchTheCode(t *testing.T) {
	const kv, pools = "kv.bellows.dev_kvclusters.yaml", "kv.bellows.dev_compactionpools.yaml"
	for _, c := range []struct {
		file, path, rule string
	}{
		{kv, "", fmt.Sprintf("size(self.metadata.name) <= %d", MaxKVClusterNameLength)},
		{pools, "", fmt.Sprintf("size(self.metadata.name) <= %d", MaxCompactionPoolNameLength)},
		{kv, ".spec.compactionPoolRef.name", fmt.Sprintf("size(self) <= %d", MaxCompactionPoolNameLength)},
		{kv, ".spec.engine.memstore.bytes", fmt.Sprintf("compareTo(quantity('%s')) >= 0", resource.NewQuantity(contract.MinMemstoreBytes, resource.BinarySI))},
		// An unset count is the default count for the immutability rule.
		{kv, ".spec.regions", fmt.Sprintf("(has(self.count) ? self.count : %d) == (has(oldSelf.count) ? oldSelf.count : %d)", DefaultRegionCount, DefaultRegionCount)},
		// splitBytes is at least the memstore, which is at least MinMemstoreBytes.
		{kv, ".spec", "quantity(string(self.regions.splitBytes)).compareTo(quantity(string(self.engine.memstore.bytes))) >= 0"},
		{pools, ".spec.drainTimeout", "duration(self) >= duration('" + MinDrainTimeout.String() + "')"},
		{pools, ".spec.autoscaling.interval", "duration(self) >= duration('" + MinInterval.String() + "')"},
		{pools, ".spec.autoscaling.syncPeriod", "duration(self) >= duration('" + MinSyncPeriod.String() + "')"},
		{pools, ".spec.autoscaling.scaleUpStabilizationWindow", "duration(self) >= duration('" + time.Duration(0).String() + "')"},
		{pools, ".spec.autoscaling.scaleDownStabilizationWindow", "duration(self) >= duration('" + time.Duration(0).String() + "')"},
		{kv, ".spec.clock.maxOffset", "duration(self) >= duration('" + time.Duration(0).String() + "') && duration(self) <= duration('" + LargestMaxClockOffset.String() + "')"},
		{kv, ".spec.walArchive.interval", "duration(self) >= duration('" + time.Duration(0).String() + "') && duration(self) <= duration('" + LargestWALArchiveInterval.String() + "')"},
	} {
		if rules := rulesAt(t, c.file, c.path); !hasRule(rules, c.rule) {
			t.Errorf("%s %s: no rule with %q", c.file, c.path, c.rule)
		}
	}
}

// The two forms a message uses to name a default.
var (
	intDefault      = regexp.MustCompile(`self\.([\w.]+) == (\d+) \? ' \(the default\)'`)
	quantityDefault = regexp.MustCompile(`quantity\(string\(self\.([\w.]+)\)\)\.compareTo\(quantity\('([^']+)'\)\) == 0 \? ' \(the default\)'`)
)

// TestCRDMessagesNameTheDefaults: a message that says "(the default)" of a
// value compares with the default the schema applies to that field.
func TestCRDMessagesNameTheDefaults(t *testing.T) {
	n := 0
	for _, file := range []string{"kv.bellows.dev_kvclusters.yaml", "kv.bellows.dev_compactionpools.yaml"} {
		for _, r := range schemaRules(crdSchema(t, file), "") {
			for _, re := range []*regexp.Regexp{intDefault, quantityDefault} {
				for _, m := range re.FindAllStringSubmatch(r.messageExpr, -1) {
					n++
					field, said := m[1], m[2]
					// A field below the rule's object: a.b is .properties.a.properties.b.
					def, ok := lookup(r.schema, ".properties."+strings.ReplaceAll(field, ".", ".properties.")+".default")
					if !ok {
						t.Errorf("%s %s: the message names a default of %s, which has none", file, r.path, field)
						continue
					}
					if sameValue(def, said) != nil {
						t.Errorf("%s %s: the message says %s defaults to %s, the schema to %v", file, r.path, field, said, def)
					}
				}
			}
		}
	}
	if n < 5 {
		t.Errorf("only %d defaults named in messages; is the pattern broken?", n)
	}
}

// TestCRDQuantitiesAreValidated: every quantity in the CRDs is checked by
// the API server, by a CEL rule that tests isQuantity first (then
// hack/crdschema drops controller-gen's pattern, whose message is a regular
// expression) or by that pattern.
func TestCRDQuantitiesAreValidated(t *testing.T) {
	var walk func(file, path string, s map[string]any)
	walk = func(file, path string, s map[string]any) {
		if s["x-kubernetes-int-or-string"] == true {
			_, pattern := s["pattern"]
			var ruled bool
			rules, _ := s["x-kubernetes-validations"].([]any)
			for _, r := range rules {
				ruled = ruled || strings.HasPrefix(r.(map[string]any)["rule"].(string), "isQuantity(string(self))")
			}
			switch {
			case pattern && ruled:
				t.Errorf("%s %s: both the pattern and an isQuantity rule (hack/crdschema did not run?)", file, path)
			case !pattern && !ruled:
				t.Errorf("%s %s: a quantity nothing validates", file, path)
			}
		}
		props, _ := s["properties"].(map[string]any)
		for k, p := range props {
			walk(file, path+"."+k, p.(map[string]any))
		}
		if a, ok := s["additionalProperties"].(map[string]any); ok {
			walk(file, path+".*", a)
		}
	}
	for _, file := range []string{"kv.bellows.dev_kvclusters.yaml", "kv.bellows.dev_compactionpools.yaml"} {
		walk(file, "", crdSchema(t, file))
	}
}

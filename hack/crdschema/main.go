// Command crdschema edits the CRDs controller-gen wrote, for what its markers
// cannot say. hack/generate.sh runs it on config/crd/bases before the chart
// copies them.
//
//   - controller-gen gives every resource.Quantity the pattern of a quantity,
//     and the API server's message when it fails is that regular expression.
//     A quantity field whose CEL rule starts with isQuantity(string(self))
//     says instead what was given and what to write ("cacheBytes: "six gigs"
//     is not a quantity; write bytes with a unit, e.g. 6Gi or 512Mi"), and
//     rejects exactly what the pattern did (isQuantity is
//     resource.ParseQuantity), so its pattern goes: the user sees one message,
//     not the regular expression first. Quantities without such a rule (those
//     of corev1.ResourceRequirements) keep their pattern.
//   - metadata.name and metadata.generateName get maxLength 253, which the
//     API server enforces on names anyway. Without a bound, it estimates the
//     cost of a CEL rule on self.metadata.name (the name-length rules) for a
//     name as long as a whole request, and refuses the CRD.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// quantityPattern is the pattern controller-gen writes for resource.Quantity.
const quantityPattern = `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`

// quantityRule is how a rule that covers the pattern starts.
const quantityRule = "isQuantity(string(self))"

// maxNameLength is a DNS subdomain's, the longest name the API server takes.
const maxNameLength = 253

func main() {
	dir := flag.String("dir", "config/crd/bases", "directory of the CRDs to edit in place")
	flag.Parse()
	files, err := filepath.Glob(filepath.Join(*dir, "*.yaml"))
	if err != nil {
		log.Fatal(err)
	}
	if len(files) == 0 {
		log.Fatalf("no CRDs in %s", *dir)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			log.Fatal(err)
		}
		out, err := Edit(data)
		if err != nil {
			log.Fatalf("%s: %v", f, err)
		}
		if err := os.WriteFile(f, out, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// Edit applies the edits to one CRD as controller-gen writes it, and
// writes it back the same way (controller-gen marshals with the same YAML
// library, so what this does not change stays byte for byte).
func Edit(data []byte) ([]byte, error) {
	const header = "---\n"
	var crd map[string]any
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return nil, err
	}
	versions, ok, err := nested[[]any](crd, "spec", "versions")
	if err != nil || !ok {
		return nil, fmt.Errorf("not a CRD: no spec.versions (%v)", err)
	}
	for i, v := range versions {
		root, ok, err := nested[map[string]any](v, "schema", "openAPIV3Schema")
		if err != nil || !ok {
			return nil, fmt.Errorf("spec.versions[%d]: no openAPIV3Schema (%v)", i, err)
		}
		boundMetadataName(root)
		dropCoveredQuantityPatterns(root)
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(data, []byte(header)) {
		out = append([]byte(header), out...)
	}
	return out, nil
}

func boundMetadataName(root map[string]any) {
	props, _ := root["properties"].(map[string]any)
	meta, _ := props["metadata"].(map[string]any)
	if meta == nil {
		return
	}
	meta["properties"] = map[string]any{
		"name":         map[string]any{"type": "string", "maxLength": maxNameLength},
		"generateName": map[string]any{"type": "string", "maxLength": maxNameLength},
	}
}

// dropCoveredQuantityPatterns walks every schema under s.
func dropCoveredQuantityPatterns(s map[string]any) {
	if s["x-kubernetes-int-or-string"] == true && s["pattern"] == quantityPattern && hasQuantityRule(s) {
		delete(s, "pattern")
	}
	props, _ := s["properties"].(map[string]any)
	for _, p := range props {
		if p, ok := p.(map[string]any); ok {
			dropCoveredQuantityPatterns(p)
		}
	}
	for _, key := range []string{"additionalProperties", "items"} {
		if sub, ok := s[key].(map[string]any); ok {
			dropCoveredQuantityPatterns(sub)
		}
	}
}

func hasQuantityRule(s map[string]any) bool {
	rules, _ := s["x-kubernetes-validations"].([]any)
	for _, r := range rules {
		if r, ok := r.(map[string]any); ok {
			if rule, _ := r["rule"].(string); strings.HasPrefix(rule, quantityRule) {
				return true
			}
		}
	}
	return false
}

// nested is the value at path in v, ok=false when a step is absent.
func nested[T any](v any, path ...string) (T, bool, error) {
	var zero T
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return zero, false, fmt.Errorf("%s: not an object", strings.Join(path, "."))
		}
		if v, ok = m[k]; !ok {
			return zero, false, nil
		}
	}
	t, ok := v.(T)
	if !ok {
		return zero, false, fmt.Errorf("%s: %T, want %T", strings.Join(path, "."), v, zero)
	}
	return t, true, nil
}

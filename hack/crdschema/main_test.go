package main

import (
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const crd = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
spec:
  versions:
  - name: v1alpha1
    schema:
      openAPIV3Schema:
        properties:
          metadata:
            type: object
          spec:
            properties:
              ruled:
                anyOf:
                - type: integer
                - type: string
                pattern: ` + quantityPattern + `
                x-kubernetes-int-or-string: true
                x-kubernetes-validations:
                - message: m
                  rule: isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))
              unruled:
                additionalProperties:
                  anyOf:
                  - type: integer
                  - type: string
                  pattern: ` + quantityPattern + `
                  x-kubernetes-int-or-string: true
                type: object
              lateCheck:
                anyOf:
                - type: integer
                - type: string
                pattern: ` + quantityPattern + `
                x-kubernetes-int-or-string: true
                x-kubernetes-validations:
                - message: m
                  rule: quantity(string(self)).isGreaterThan(quantity('0'))
            type: object
        type: object
`

// TestEdit: only a quantity whose rule checks isQuantity first loses its
// pattern; metadata.name gets its bound; a second run changes nothing.
func TestEdit(t *testing.T) {
	out, err := Edit([]byte(crd))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	root := "spec.versions.0.schema.openAPIV3Schema.properties."
	for path, want := range map[string]any{
		"spec.properties.ruled.pattern":                        nil,
		"spec.properties.unruled.additionalProperties.pattern": quantityPattern,
		"spec.properties.lateCheck.pattern":                    quantityPattern,
		"metadata.properties.name.maxLength":                   float64(maxNameLength),
		"metadata.properties.generateName.maxLength":           float64(maxNameLength),
	} {
		if v := at(got, root+path); v != want {
			t.Errorf("%s: %v, want %v", path, v, want)
		}
	}
	if !strings.HasPrefix(string(out), "---\n") {
		t.Error("the document marker is gone")
	}
	again, err := Edit(out)
	if err != nil || string(again) != string(out) {
		t.Errorf("a second run changed the CRD (%v):\n%s", err, again)
	}
}

// at is the value at a dotted path (list indices as numbers), nil if absent.
func at(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			v = c[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(c) {
				return nil
			}
			v = c[i]
		default:
			return nil
		}
	}
	return v
}

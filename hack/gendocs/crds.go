package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// external are the fields whose schema is a Kubernetes type embedded in
// ours (controller-gen inlines its whole schema: the affinity alone is
// hundreds of fields). The reference names the type and links its Go
// documentation instead of walking it. A path listed here that a CRD does not
// have is an error, so the list cannot go stale silently; a new embedded type
// not listed is walked in full, which shows in the generated file's diff.
var external = map[string]string{
	"spec.resources":                            "k8s.io/api/core/v1#ResourceRequirements",
	"spec.scheduling.affinity":                  "k8s.io/api/core/v1#Affinity",
	"spec.scheduling.topologySpreadConstraints": "k8s.io/api/core/v1#TopologySpreadConstraint",
	"spec.scheduling.tolerations":               "k8s.io/api/core/v1#Toleration",
	"spec.bucket.credentialsSecretRef":          "k8s.io/api/core/v1#LocalObjectReference",
	"status.conditions":                         "k8s.io/apimachinery/pkg/apis/meta/v1#Condition",
}

// CRDsMarkdown renders the reference of the CRDs in files (controller-gen's
// YAML, one CRD each): per CRD its names, subresources and printer columns,
// then one row per field of spec and status from the openAPIV3Schema.
func CRDsMarkdown(files []string) (string, error) {
	var crds []apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &crd); err != nil {
			return "", fmt.Errorf("%s: %w", f, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			return "", fmt.Errorf("%s: kind %q, want CustomResourceDefinition", f, crd.Kind)
		}
		crds = append(crds, crd)
	}
	// KVCluster first: it is what a user writes first; then by kind.
	slices.SortFunc(crds, func(a, b apiextensionsv1.CustomResourceDefinition) int {
		ak, bk := a.Spec.Names.Kind, b.Spec.Names.Kind
		if (ak == "KVCluster") != (bk == "KVCluster") {
			if ak == "KVCluster" {
				return -1
			}
			return 1
		}
		return strings.Compare(ak, bk)
	})
	var b strings.Builder
	b.WriteString("# CRD reference\n\n")
	b.WriteString("Generated from the CRDs in `config/crd/bases` (controller-gen's output of `api/v1alpha1`) by\n")
	b.WriteString("`make generate` (`hack/gendocs`); do not edit. Each row is a field of the\n")
	b.WriteString("openAPIV3Schema the API server validates against: its type, the default the API server\n")
	b.WriteString("fills in, the validation (OpenAPI bounds and enums, CEL rules with their messages) and\n")
	b.WriteString("the description from the Go type's comment. What the operator fills in beyond the\n")
	b.WriteString("schema's defaults (images, resources, placement) is in [../operator.md](../operator.md)\n")
	b.WriteString("and [../defaults.md](../defaults.md).\n\n")
	for _, crd := range crds {
		fmt.Fprintf(&b, "- [%s](#%s)\n", crd.Spec.Names.Kind, strings.ToLower(crd.Spec.Names.Kind))
	}
	seen := map[string]bool{}
	for _, crd := range crds {
		if err := writeCRD(&b, &crd, seen); err != nil {
			return "", fmt.Errorf("%s: %w", crd.Name, err)
		}
	}
	for path := range external {
		if !seen[path] {
			return "", fmt.Errorf("hack/gendocs: external type path %s is in no CRD: remove it from the list", path)
		}
	}
	return b.String(), nil
}

func writeCRD(b *strings.Builder, crd *apiextensionsv1.CustomResourceDefinition, seen map[string]bool) error {
	n := crd.Spec.Names
	fmt.Fprintf(b, "\n## %s\n\n", n.Kind)
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return fmt.Errorf("version %s has no schema", v.Name)
		}
		root := v.Schema.OpenAPIV3Schema
		fmt.Fprintf(b, "`apiVersion: %s/%s`, `kind: %s`", crd.Spec.Group, v.Name, n.Kind)
		if v.Storage {
			b.WriteString(" (the storage version)")
		}
		b.WriteString("\n\n")
		if root.Description != "" {
			fmt.Fprintf(b, "%s\n\n", text(root.Description))
		}
		fmt.Fprintf(b, "| | |\n|---|---|\n")
		fmt.Fprintf(b, "| scope | %s |\n", crd.Spec.Scope)
		fmt.Fprintf(b, "| plural, singular | `%s`, `%s` |\n", n.Plural, n.Singular)
		if len(n.ShortNames) > 0 {
			fmt.Fprintf(b, "| short names | %s |\n", codeList(n.ShortNames))
		}
		if len(n.Categories) > 0 {
			fmt.Fprintf(b, "| categories | %s |\n", codeList(n.Categories))
		}
		if s := v.Subresources; s != nil {
			var subs []string
			if s.Status != nil {
				subs = append(subs, "`/status`")
			}
			if s.Scale != nil {
				sel := ""
				if s.Scale.LabelSelectorPath != nil {
					sel = ", selector `" + *s.Scale.LabelSelectorPath + "`"
				}
				subs = append(subs, fmt.Sprintf("`/scale` (replicas `%s`, status `%s`%s)", s.Scale.SpecReplicasPath, s.Scale.StatusReplicasPath, sel))
			}
			if len(subs) > 0 {
				fmt.Fprintf(b, "| subresources | %s |\n", strings.Join(subs, ", "))
			}
		}
		if len(v.AdditionalPrinterColumns) > 0 {
			var cols []string
			for _, c := range v.AdditionalPrinterColumns {
				cols = append(cols, c.Name+" "+code(c.JSONPath))
			}
			fmt.Fprintf(b, "| `kubectl get` columns | %s |\n", strings.Join(cols, ", "))
		}
		if rules := rulesOf(root); len(rules) > 0 {
			fmt.Fprintf(b, "| rules on the object | %s |\n", strings.Join(rules, "<br>"))
		}
		b.WriteString("\n| field | type | default | validation | description |\n|---|---|---|---|---|\n")
		var rows []string
		for _, top := range []string{"spec", "status"} {
			s, ok := root.Properties[top]
			if !ok {
				continue
			}
			walk(&rows, top, &s, slices.Contains(root.Required, top), seen)
		}
		b.WriteString(strings.Join(rows, ""))
	}
	return nil
}

// walk appends the row of the field at path and of everything below it.
func walk(rows *[]string, path string, s *apiextensionsv1.JSONSchemaProps, required bool, seen map[string]bool) {
	ext, isExternal := external[path]
	if isExternal {
		seen[path] = true
	}
	typ := typeOf(s)
	if isExternal {
		typ = externalType(s, ext)
	}
	*rows = append(*rows, fmt.Sprintf("| %s | %s | %s | %s | %s |\n", code(path), typ, defaultOf(s), validationOf(s, required), text(s.Description)))
	if isExternal {
		return
	}
	switch {
	case s.Type == "object" && len(s.Properties) > 0:
		for _, name := range sortedKeys(s.Properties) {
			child := s.Properties[name]
			walk(rows, path+"."+name, &child, slices.Contains(s.Required, name), seen)
		}
	case s.Type == "array" && s.Items != nil && s.Items.Schema != nil && s.Items.Schema.Type == "object" && len(s.Items.Schema.Properties) > 0:
		it := s.Items.Schema
		for _, name := range sortedKeys(it.Properties) {
			child := it.Properties[name]
			walk(rows, path+"[]."+name, &child, slices.Contains(it.Required, name), seen)
		}
	case s.Type == "object" && s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil &&
		s.AdditionalProperties.Schema.Type == "object" && len(s.AdditionalProperties.Schema.Properties) > 0:
		v := s.AdditionalProperties.Schema
		for _, name := range sortedKeys(v.Properties) {
			child := v.Properties[name]
			walk(rows, path+".*."+name, &child, slices.Contains(v.Required, name), seen)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// typeOf is a field's type as a user writes it: string, integer (int32),
// quantity, map[string]string, []object, ...
func typeOf(s *apiextensionsv1.JSONSchemaProps) string {
	switch {
	case s.XIntOrString:
		for _, r := range s.XValidations {
			if strings.Contains(r.Rule, "isQuantity(") {
				return "quantity"
			}
		}
		if s.Pattern != "" && strings.Contains(s.Pattern, "[KMGTPE]i") {
			return "quantity"
		}
		return "integer or string"
	case s.Type == "array":
		if s.Items != nil && s.Items.Schema != nil {
			return "[]" + typeOf(s.Items.Schema)
		}
		return "array"
	case s.Type == "object" && s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
		return "map[string]" + typeOf(s.AdditionalProperties.Schema)
	case s.Type == "integer" && s.Format != "":
		return "integer (" + s.Format + ")"
	case s.Type == "":
		return "any"
	}
	return s.Type
}

// externalType links an embedded Kubernetes type's Go documentation.
func externalType(s *apiextensionsv1.JSONSchemaProps, ref string) string {
	pkg, name, _ := strings.Cut(ref, "#")
	parts := strings.Split(pkg, "/")
	short := strings.Join(parts[len(parts)-2:], "/") // core/v1, meta/v1
	link := fmt.Sprintf("[%s %s](https://pkg.go.dev/%s#%s)", short, name, pkg, name)
	if s.Type == "array" {
		return "list of " + link
	}
	return link
}

func defaultOf(s *apiextensionsv1.JSONSchemaProps) string {
	if s.Default == nil {
		return ""
	}
	return code(compactJSON(s.Default.Raw))
}

// validationOf lists a field's constraints: required, enum, bounds, pattern,
// list and map semantics, and each CEL rule with its message.
func validationOf(s *apiextensionsv1.JSONSchemaProps, required bool) string {
	var v []string
	if required {
		v = append(v, "required")
	}
	if len(s.Enum) > 0 {
		var vals []string
		for _, e := range s.Enum {
			vals = append(vals, compactJSON(e.Raw))
		}
		v = append(v, "one of "+codeList(vals))
	}
	bound := func(f *float64, op string) {
		if f != nil {
			v = append(v, op+" "+strconv.FormatFloat(*f, 'f', -1, 64))
		}
	}
	bound(s.Minimum, map[bool]string{false: "≥", true: ">"}[s.ExclusiveMinimum])
	bound(s.Maximum, map[bool]string{false: "≤", true: "<"}[s.ExclusiveMaximum])
	count := func(what string, min, max *int64) {
		switch {
		case min != nil && max != nil:
			v = append(v, fmt.Sprintf("%s %d–%d", what, *min, *max))
		case min != nil:
			v = append(v, fmt.Sprintf("%s ≥ %d", what, *min))
		case max != nil:
			v = append(v, fmt.Sprintf("%s ≤ %d", what, *max))
		}
	}
	count("length", s.MinLength, s.MaxLength)
	count("items", s.MinItems, s.MaxItems)
	count("properties", s.MinProperties, s.MaxProperties)
	if s.Items != nil && s.Items.Schema != nil {
		it := s.Items.Schema
		count("each item's length", it.MinLength, it.MaxLength)
	}
	if s.Pattern != "" {
		v = append(v, "pattern "+code(s.Pattern))
	}
	if s.XListType != nil && *s.XListType != "atomic" {
		lt := "list type " + *s.XListType
		if len(s.XListMapKeys) > 0 {
			lt += " (keys " + codeList(s.XListMapKeys) + ")"
		}
		v = append(v, lt)
	}
	v = append(v, rulesOf(s)...)
	return strings.Join(v, "<br>")
}

// rulesOf renders the CEL rules of s: the rule, and its message when it is
// a fixed one (a messageExpression is computed from the value).
func rulesOf(s *apiextensionsv1.JSONSchemaProps) []string {
	var out []string
	for _, r := range s.XValidations {
		line := "rule " + code(r.Rule)
		if r.OptionalOldSelf != nil && *r.OptionalOldSelf {
			line += " (also on create)"
		}
		if r.FieldPath != "" {
			line += " on " + code(r.FieldPath)
		}
		if r.Message != "" {
			line += ": " + text(r.Message)
		}
		out = append(out, line)
	}
	return out
}

func compactJSON(raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// crdFiles are the YAML files of dir.
func crdFiles(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("no CRDs in %s", dir)
	}
	return files, err
}

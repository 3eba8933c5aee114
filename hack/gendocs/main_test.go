package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bellows-kv/bellows/internal/contract"
)

// TestCommittedDocsAreCurrent: what gendocs writes now is what is
// committed. hack/verify-generated.sh checks the same by running
// hack/generate.sh; this catches a stale file in `go test` alone.
func TestCommittedDocsAreCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := crdFiles(filepath.Join(root, "config", "crd", "bases"))
	if err != nil {
		t.Fatal(err)
	}
	crds, err := CRDsMarkdown(files)
	if err != nil {
		t.Fatal(err)
	}
	grpc, err := GRPCMarkdown(filepath.Join(root, "proto"))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"docs/defaults.md":       contract.DefaultsMarkdown(),
		"docs/reference/crds.md": crds,
		"docs/reference/grpc.md": grpc,
	} {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is stale: run `make generate` (hack/generate.sh) and commit the result", path)
		}
	}
}

const testCRD = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.dev
spec:
  group: example.dev
  names:
    kind: Widget
    listKind: WidgetList
    plural: widgets
    singular: widget
    shortNames: [wd]
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - jsonPath: .spec.size
      name: Size
      type: integer
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.size
        statusReplicasPath: .status.size
    schema:
      openAPIV3Schema:
        description: Widget is a test.
        type: object
        required: [spec]
        x-kubernetes-validations:
        - rule: size(self.metadata.name) <= 10
          messageExpression: '''too long'''
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [mode]
            properties:
              mode:
                description: |-
                  Mode picks one.

                  A second paragraph with <name> and ` + "`<code>`" + `.
                type: string
                enum: [A, B]
                default: A
              size:
                type: integer
                format: int32
                minimum: 1
                maximum: 9
              budget:
                anyOf: [{type: integer}, {type: string}]
                x-kubernetes-int-or-string: true
                x-kubernetes-validations:
                - rule: isQuantity(string(self)) || self == 'a|b'
                  message: budget must be a quantity
              parts:
                type: array
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string, maxLength: 5}
              labels:
                type: object
                additionalProperties: {type: string}
              resources:
                type: object
                properties:
                  limits: {type: object}
`

func writeTestCRD(t *testing.T, crd string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "widgets.yaml")
	if err := os.WriteFile(p, []byte(crd), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCRDsMarkdown(t *testing.T) {
	saved := external
	t.Cleanup(func() { external = saved })
	external = map[string]string{"spec.resources": "k8s.io/api/core/v1#ResourceRequirements"}
	md, err := CRDsMarkdown([]string{writeTestCRD(t, testCRD)})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Widget\n",
		"`apiVersion: example.dev/v1`, `kind: Widget` (the storage version)",
		"| short names | `wd` |",
		"| subresources | `/status`, `/scale` (replicas `.spec.size`, status `.status.size`) |",
		"| `kubectl get` columns | Size `.spec.size` |",
		"| rules on the object | rule `size(self.metadata.name) <= 10` |",
		"| `spec` | object |  | required |  |",
		"| `spec.mode` | string | `\"A\"` | required<br>one of `\"A\"`, `\"B\"` | Mode picks one.<br>A second paragraph with &lt;name> and `<code>`. |",
		"| `spec.size` | integer (int32) |  | ≥ 1<br>≤ 9 |  |",
		"| `spec.budget` | quantity |  | rule `isQuantity(string(self)) \\|\\| self == 'a\\|b'`: budget must be a quantity |  |",
		"| `spec.parts` | []object |",
		"| `spec.parts[].name` | string |  | required<br>length ≤ 5 |  |",
		"| `spec.labels` | map[string]string |",
		"| `spec.resources` | [core/v1 ResourceRequirements](https://pkg.go.dev/k8s.io/api/core/v1#ResourceRequirements) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in\n%s", want, md)
		}
	}
	for _, unwanted := range []string{"apiVersion` |", "`spec.resources.limits`", "`metadata`"} {
		if strings.Contains(md, unwanted) {
			t.Errorf("unexpected %q in\n%s", unwanted, md)
		}
	}
}

func TestCRDsMarkdownStaleExternalPath(t *testing.T) {
	saved := external
	t.Cleanup(func() { external = saved })
	external = map[string]string{"spec.gone": "k8s.io/api/core/v1#Affinity"}
	if _, err := CRDsMarkdown([]string{writeTestCRD(t, testCRD)}); err == nil || !strings.Contains(err.Error(), "spec.gone") {
		t.Fatalf("err = %v, want one naming spec.gone", err)
	}
}

func TestCRDsMarkdownRejectsAnUnknownField(t *testing.T) {
	if _, err := CRDsMarkdown([]string{writeTestCRD(t, testCRD+"  bogus: 1\n")}); err == nil {
		t.Fatal("a CRD with an unknown field was accepted")
	}
}

const testProto = `// The test API (port 7600).
syntax = "proto3";

package test.v1;

// Echo answers.
// It has two lines.
service Echo {
  // Say says it back.
  rpc Say(SayRequest) returns (SayResponse);
  rpc Listen(stream SayRequest) returns (stream SayResponse);
}

message SayRequest {
  // text is what to say; a | b.
  string text = 1;
  optional uint32 times = 2;
  repeated Tone tones = 3;
  map<string, Inner> extras = 4;
  oneof how {
    bool loud = 5;
    bool soft = 6;
  }
  message Inner {
    int64 n = 1; // n counts.
  }
}

enum Tone {
  TONE_UNSPECIFIED = 0;
  // High <pitch>.
  TONE_HIGH = 1;
}

message SayResponse {}
`

func TestGRPCMarkdown(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "test", "v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "test", "v1", "echo.proto"), []byte(testProto), 0o644); err != nil {
		t.Fatal(err)
	}
	md, err := GRPCMarkdown(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- [test.v1.Echo](#testv1echo) (`test/v1/echo.proto`, port 7600)",
		"## test.v1\n\n`proto/test/v1/echo.proto`: The test API (port 7600).",
		"### test.v1.Echo\n\nEcho answers. It has two lines.",
		"| `Say` | [SayRequest](#testv1sayrequest) | [SayResponse](#testv1sayresponse) | Say says it back. |",
		"| `Listen` | stream [SayRequest](#testv1sayrequest) | stream [SayResponse](#testv1sayresponse) |  |",
		"| `text` | 1 | string | text is what to say; a \\| b. |",
		"| `times` | 2 | optional uint32 |  |",
		"| `tones` | 3 | repeated [Tone](#testv1tone) |  |",
		"| `extras` | 4 | map&lt;string, [SayRequest.Inner](#testv1sayrequestinner)&gt; |  |",
		"| `loud` | 5 | bool | one of `how`. |",
		"### test.v1.SayRequest.Inner",
		"| `n` | 1 | int64 | n counts. |",
		"| `TONE_HIGH` | 1 | High &lt;pitch>. |",
		"### test.v1.SayResponse\n\nNo fields.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in\n%s", want, md)
		}
	}
	if strings.Contains(md, "ExtrasEntry") {
		t.Errorf("a map entry is documented as a message:\n%s", md)
	}
}

func TestGRPCMarkdownRefusesWhatProtocRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.proto"), []byte("syntax = \"proto3\";\nmessage M { Missing m = 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := GRPCMarkdown(dir); err == nil {
		t.Fatal("a proto naming an undefined type was accepted")
	}
}

func TestAnchor(t *testing.T) {
	for in, want := range map[string]string{
		"bellows.kv.v1.PutRequest": "bellowskvv1putrequest",
		"Two Words_and-dash":       "two-words_and-dash",
	} {
		if got := anchor(in); got != want {
			t.Errorf("anchor(%q) = %q, want %q", in, got, want)
		}
	}
}

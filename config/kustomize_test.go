// Package config holds the kustomize bases; this test builds them as
// `kubectl apply -k` would, so a broken base fails `make test`.
package config

import (
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func TestKustomizeBasesBuild(t *testing.T) {
	cases := map[string][]string{
		"default": {"CustomResourceDefinition/kvclusters.kv.bellows.dev", "CustomResourceDefinition/compactionpools.kv.bellows.dev", "CustomResourceDefinition/backups.kv.bellows.dev", "CustomResourceDefinition/scheduledbackups.kv.bellows.dev", "Deployment/", "ServiceAccount/", "ClusterRole/", "ClusterRoleBinding/", "Namespace/bellows-system"},
		"samples": {"KVCluster/", "CompactionPool/"},
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	for dir, want := range cases {
		res, err := k.Run(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			t.Fatalf("kustomize build config/%s: %v", dir, err)
		}
		var ids []string
		for _, r := range res.Resources() {
			ids = append(ids, r.GetKind()+"/"+r.GetName())
		}
		for _, w := range want {
			found := false
			for _, id := range ids {
				if len(id) >= len(w) && id[:len(w)] == w {
					found = true
				}
			}
			if !found {
				t.Errorf("config/%s: no %s among %v", dir, w, ids)
			}
		}
	}
}

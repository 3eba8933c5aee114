// Package v1alpha1 holds the kv.bellows.dev/v1alpha1 API: KVCluster (the
// storage pods of one Bellows cluster) and CompactionPool (the autoscaled
// compaction workers they offload to).
//
// +kubebuilder:object:generate=true
// +groupName=kv.bellows.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "kv.bellows.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &KVCluster{}, &KVClusterList{}, &CompactionPool{}, &CompactionPoolList{}, &Backup{}, &BackupList{}, &ScheduledBackup{}, &ScheduledBackupList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupPhase is where a Backup is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed
type BackupPhase string

const (
	// BackupPending: waiting for its KVCluster to exist and be Ready.
	BackupPending BackupPhase = "Pending"
	// BackupRunning: a storage pod is taking it.
	BackupRunning BackupPhase = "Running"
	// BackupCompleted: recorded in the bucket; it restores (bellows restore).
	BackupCompleted BackupPhase = "Completed"
	// BackupFailed: not recorded; status.message says why. A Backup is
	// not retried once Failed: create another.
	BackupFailed BackupPhase = "Failed"
)

// BackupSpec is what to back up.
type BackupSpec struct {
	// Cluster is the KVCluster to back up, in the Backup's namespace.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.cluster is immutable: a Backup is of one cluster; create another Backup for another cluster"
	Cluster BackupClusterRef `json:"cluster"`
}

// BackupClusterRef names a KVCluster.
type BackupClusterRef struct {
	// Name of the KVCluster.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
}

// BackupStatus is what became of a Backup.
type BackupStatus struct {
	// Phase: Pending, Running, Completed or Failed.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`
	// BackupID is the backup's ID in the cluster's bucket
	// (backups/<id>/backup.json): the Backup's name.
	// +optional
	BackupID string `json:"backupID,omitempty"`
	// TS is the backup's timestamp (the cluster clock's nanoseconds since
	// the epoch): it holds every write committed at or before it, in every
	// region, and none after.
	// +optional
	TS int64 `json:"ts,omitempty"`
	// Time is TS as a time.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// StartedAt and StoppedAt bound the operator's attempt.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	StoppedAt *metav1.Time `json:"stoppedAt,omitempty"`
	// Regions and Files the backup holds.
	// +optional
	Regions int32 `json:"regions,omitempty"`
	// +optional
	Files int32 `json:"files,omitempty"`
	// Bytes of the files it names; CopiedBytes of those it copied (the
	// rest are shared with earlier backups).
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// +optional
	CopiedBytes int64 `json:"copiedBytes,omitempty"`
	// Message says why the Backup is Pending or Failed.
	// +optional
	Message string `json:"message,omitempty"`
	// Conditions: Completed (True once recorded; False with the reason
	// while it is not, or when it failed).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Backup is a backup of a KVCluster at one timestamp, taken once, as
// CloudNativePG's Backup is (docs/backup.md). Its name is the backup's ID
// in the cluster's bucket. Deleting the Backup leaves the backup in the
// bucket (bellows backup delete removes it).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=kvbackup,categories=bellows
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Time",type=string,JSONPath=`.status.time`
// +kubebuilder:printcolumn:name="Files",type=integer,JSONPath=`.status.files`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule=`self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([a-z0-9-]*[a-z0-9])?$')`,message="metadata.name is the backup's ID in the bucket: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit (no dots)"
type Backup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BackupSpec   `json:"spec"`
	Status BackupStatus `json:"status,omitempty"`
}

// BackupList is a list of Backups.
//
// +kubebuilder:object:root=true
type BackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Backup `json:"items"`
}

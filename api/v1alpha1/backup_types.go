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

// ScheduledBackupSpec is when to back up a KVCluster, and how many of the
// backups to keep.
type ScheduledBackupSpec struct {
	// Cluster is the KVCluster to back up, in the ScheduledBackup's
	// namespace.
	Cluster BackupClusterRef `json:"cluster"`
	// Schedule is a cron schedule in UTC: five fields (minute hour
	// day-of-month month day-of-week), e.g. "0 3 * * *" for 03:00 every
	// day, or @hourly, @daily, @weekly.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Schedule string `json:"schedule"`
	// Immediate takes the first backup at once, not at the schedule's
	// first time.
	// +optional
	Immediate bool `json:"immediate,omitempty"`
	// Suspend stops new backups (the kept ones stay).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
	// KeepLast is how many of its newest Completed backups to keep; older
	// ones are deleted, unless maxAge keeps them: the Backup object and the
	// backup in the bucket (its files that no other backup names). 0 (and
	// no maxAge) keeps them all.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	KeepLast int32 `json:"keepLast,omitempty"`
	// MaxAge keeps every Completed backup that finished within it (e.g.
	// 720h for 30 days); older ones are deleted unless keepLast keeps
	// them. The newest is always kept. Empty: no age limit.
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && duration(self) >= duration('1m')`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'maxAge: "' + self + '" is not a duration; ' + (self.matches('[0-9]d') ? 'use hours, e.g. 720h for 30 days' : 'write a number with a unit (h, m), e.g. 168h') : 'maxAge: ' + self + ' is below the minimum 1m; e.g. 168h for a week'`
	// +optional
	MaxAge Duration `json:"maxAge,omitempty"`
}

// ScheduledBackupStatus is what the schedule did.
type ScheduledBackupStatus struct {
	// LastScheduleTime is when it last created a Backup.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// NextScheduleTime is when it creates the next one.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// LastBackup names the Backup it created last.
	// +optional
	LastBackup string `json:"lastBackup,omitempty"`
	// LastCompletedBackup names its newest Completed Backup.
	// +optional
	LastCompletedBackup string `json:"lastCompletedBackup,omitempty"`
	// Conditions: Ready (False with reason InvalidSchedule or
	// ClusterNotFound when it cannot schedule).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ScheduledBackup creates a Backup of a KVCluster on a cron schedule and
// deletes those that keepLast and maxAge do not keep, as CloudNativePG's
// ScheduledBackup and retentionPolicy do. Its Backups are named <name>-<UTC time> and owned by it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=kvschedbackup,categories=bellows
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Last",type=string,JSONPath=`.status.lastBackup`
// +kubebuilder:printcolumn:name="Next",type=date,JSONPath=`.status.nextScheduleTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule=`self.metadata.name.size() <= 46`,message="metadata.name: at most 46 characters, so that its Backups' names (<name>-<UTC time>, 17 more) are backup IDs of at most 63"
type ScheduledBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ScheduledBackupSpec   `json:"spec"`
	Status ScheduledBackupStatus `json:"status,omitempty"`
}

// ScheduledBackupList is a list of ScheduledBackups.
//
// +kubebuilder:object:root=true
type ScheduledBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ScheduledBackup `json:"items"`
}

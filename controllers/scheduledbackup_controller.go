package controllers

// The ScheduledBackup controller creates a Backup at each time of its cron
// schedule and, once more than keepLast of its Backups are Completed,
// deletes the oldest: first the backup in the bucket (Admin.DeleteBackup at
// a storage pod), then the Backup object, so a failure in between leaves an
// object whose deletion is tried again, never data no object names.
//
// A missed time (the operator was down) is made up once, not once per time
// missed: the next Backup is created at the first reconcile after it.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// +kubebuilder:rbac:groups=kv.bellows.dev,resources=scheduledbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=kv.bellows.dev,resources=scheduledbackups/status,verbs=update
// +kubebuilder:rbac:groups=kv.bellows.dev,resources=backups,verbs=get;list;watch;create;delete

// LabelScheduledBackup, on a Backup, names the ScheduledBackup that made it.
const LabelScheduledBackup = "kv.bellows.dev/scheduled-backup"

// ScheduledBackupReconciler reconciles ScheduledBackups.
type ScheduledBackupReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// StoreAddr and Now as in BackupReconciler.
	StoreAddr func(c *kvapi.KVCluster) string
	Now       func() time.Time
	// Metrics, when set, get each schedule's newest completion and period.
	Metrics *ScheduleMetrics

	credentials operatorCredentials
}

// scheduledBackupName is the name of the Backup a schedule creates at t.
func scheduledBackupName(schedule string, t time.Time) string {
	return schedule + "-" + t.UTC().Format("20060102t150405z")
}

// nextRun is when schedule's next Backup is due: at once for a first run
// with immediate, else the schedule's first time after the last run (or
// after since, when it never ran).
func nextRun(sched cron.Schedule, last *metav1.Time, since time.Time, immediate bool) time.Time {
	if last == nil {
		if immediate {
			return since
		}
		return sched.Next(since)
	}
	return sched.Next(last.Time)
}

// Reconcile implements reconcile.Reconciler.
func (r *ScheduledBackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sb kvapi.ScheduledBackup
	if err := r.Get(ctx, req.NamespacedName, &sb); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.forget(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := clockNow(r.Now)
	sched, err := cron.ParseStandard(sb.Spec.Schedule)
	if err != nil {
		msg := fmt.Sprintf("spec.schedule %q is not a cron schedule: %v; write five fields (minute hour day-of-month month day-of-week), e.g. \"0 3 * * *\", or @daily", sb.Spec.Schedule, err)
		if c := meta.FindStatusCondition(sb.Status.Conditions, kvapi.ConditionReady); c == nil || c.Reason != kvapi.ReasonInvalidSchedule {
			r.Recorder.Eventf(&sb, nil, corev1.EventTypeWarning, kvapi.ReasonInvalidSchedule, "Schedule", "%s", truncate(msg, maxEventNote))
		}
		setCondition(&sb.Status.Conditions, sb.Generation, kvapi.ConditionReady, false, kvapi.ReasonInvalidSchedule, msg)
		r.Metrics.forget(req.String())
		sb.Status.NextScheduleTime = nil
		return ctrl.Result{}, r.Status().Update(ctx, &sb)
	}

	var owned kvapi.BackupList
	if err := r.List(ctx, &owned, client.InNamespace(sb.Namespace), client.MatchingLabels{LabelScheduledBackup: sb.Name}); err != nil {
		return ctrl.Result{}, err
	}
	lastCompleted, err := r.prune(ctx, &sb, owned.Items)
	if err != nil {
		return ctrl.Result{}, err
	}

	due := nextRun(sched, sb.Status.LastScheduleTime, sb.CreationTimestamp.Time, sb.Spec.Immediate)
	if !sb.Spec.Suspend && !now.Before(due) {
		b := &kvapi.Backup{
			ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: scheduledBackupName(sb.Name, now),
				Labels: map[string]string{LabelScheduledBackup: sb.Name}},
			Spec: kvapi.BackupSpec{Cluster: sb.Spec.Cluster},
		}
		if err := controllerutil.SetControllerReference(&sb, b, r.Scheme()); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, err
		}
		r.Recorder.Eventf(&sb, b, corev1.EventTypeNormal, kvapi.ReasonScheduled, "Backup", "created Backup %s of %s", b.Name, sb.Spec.Cluster.Name)
		t := metav1.NewTime(now)
		sb.Status.LastScheduleTime, sb.Status.LastBackup = &t, b.Name
		due = sched.Next(now)
	}
	next := metav1.NewTime(due)
	sb.Status.NextScheduleTime = &next
	r.Metrics.forget(req.String())
	if m := r.Metrics; m != nil && !sb.Spec.Suspend {
		labels := prometheus.Labels{"scheduled_backup": req.String(), "cluster": sb.Spec.Cluster.Name}
		m.LastCompleted.With(labels).Set(float64(lastCompleted.Unix()))
		m.Period.With(labels).Set(sched.Next(due).Sub(due).Seconds())
	}
	if sb.Spec.Suspend {
		sb.Status.NextScheduleTime = nil
		setCondition(&sb.Status.Conditions, sb.Generation, kvapi.ConditionReady, true, kvapi.ReasonSuspended, "suspended: no new backups")
	} else {
		setCondition(&sb.Status.Conditions, sb.Generation, kvapi.ConditionReady, true, kvapi.ReasonScheduled,
			fmt.Sprintf("next backup at %s", due.UTC().Format(time.RFC3339)))
	}
	if err := r.Status().Update(ctx, &sb); err != nil {
		return ctrl.Result{}, err
	}
	if sb.Spec.Suspend {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: max(due.Sub(now), time.Second)}, nil
}

// prune deletes the oldest Completed Backups beyond keepLast, data first,
// and records the newest Completed one; it returns when that one completed
// (the schedule's creation when none has).
func (r *ScheduledBackupReconciler) prune(ctx context.Context, sb *kvapi.ScheduledBackup, backups []kvapi.Backup) (time.Time, error) {
	var done []kvapi.Backup
	for _, b := range backups {
		if b.Status.Phase == kvapi.BackupCompleted && b.DeletionTimestamp == nil {
			done = append(done, b)
		}
	}
	// Newest first, by the backup's timestamp.
	slices.SortFunc(done, func(a, b kvapi.Backup) int { return cmp.Compare(b.Status.TS, a.Status.TS) })
	last := sb.CreationTimestamp.Time
	if len(done) > 0 {
		sb.Status.LastCompletedBackup = done[0].Name
		if t := done[0].Status.StoppedAt; t != nil {
			last = t.Time
		}
	}
	expired := r.expired(sb, done)
	if len(expired) == 0 {
		return last, nil
	}
	var c kvapi.KVCluster
	if err := r.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: sb.Spec.Cluster.Name}, &c); err != nil {
		// No store to delete the data through: keep the objects (and so
		// the record of the data) until there is.
		return last, client.IgnoreNotFound(err)
	}
	var pruned []string
	for _, b := range expired {
		err := (storeAdmin{reader: r.Client, override: r.StoreAddr, certs: certificates{client: r.Client}, creds: &r.credentials}).call(ctx, &c, func(ctx context.Context, admin kvpb.AdminClient) error {
			_, err := admin.DeleteBackup(ctx, &kvpb.DeleteBackupRequest{Id: b.Status.BackupID})
			if status.Code(err) == codes.NotFound {
				return nil // deleted before, by us or by hand
			}
			return err
		})
		if err != nil {
			return last, fmt.Errorf("deleting backup %s from the bucket: %w", b.Name, err)
		}
		if err := r.Delete(ctx, &b); client.IgnoreNotFound(err) != nil {
			return last, err
		}
		pruned = append(pruned, b.Name)
	}
	r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, kvapi.ReasonBackupsPruned, "Prune", "deleted %v (keepLast %d, maxAge %q), from the bucket too", pruned, sb.Spec.KeepLast, sb.Spec.MaxAge)
	return last, nil
}

// expired are the Completed backups (done, newest first) that retention
// deletes: those neither among the newest keepLast nor finished within
// maxAge, when either is set; the newest is always kept. A maxAge that does
// not parse (stored before the CRD rule) keeps by age.
func (r *ScheduledBackupReconciler) expired(sb *kvapi.ScheduledBackup, done []kvapi.Backup) []kvapi.Backup {
	maxAge, _ := sb.Spec.MaxAge.Parse()
	if sb.Spec.KeepLast == 0 && maxAge <= 0 {
		return nil
	}
	cutoff := clockNow(r.Now).Add(-maxAge)
	var out []kvapi.Backup
	for i, b := range done {
		byCount := sb.Spec.KeepLast > 0 && i < int(sb.Spec.KeepLast)
		byAge := maxAge > 0 && b.Status.StoppedAt != nil && b.Status.StoppedAt.After(cutoff)
		if i == 0 || byCount || byAge {
			continue
		}
		out = append(out, b)
	}
	return out
}

// SetupWithManager watches ScheduledBackups and the Backups they own (a
// Backup's completion may let retention delete an older one).
func (r *ScheduledBackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&kvapi.ScheduledBackup{}).
		Owns(&kvapi.Backup{}).
		Named("scheduledbackup").
		Complete(r)
}

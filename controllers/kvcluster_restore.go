package controllers

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
)

// restorePoll is how often a pass looks at a running restore Job (its
// completion also triggers one, through the Job watch).
const restorePoll = 10 * time.Second

// restoreFromBackup runs spec.bootstrap.recovery (a Job running bellows
// restore into the cluster's bucket) before the StatefulSet exists, and
// holds the pass until the Job completed: a store started on the empty
// bucket would make it a new cluster, which the restore then refuses. Once
// the StatefulSet exists the restore is behind it and nothing is done.
func (r *KVClusterReconciler) restoreFromBackup(ctx context.Context, p *kvPass) Result {
	c := p.cluster
	job := specs.BuildRestoreJob(c)
	if job == nil {
		return Continue()
	}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.StatefulSetName()}, &appsv1.StatefulSet{})
	switch {
	case err == nil:
		return Continue()
	case !apierrors.IsNotFound(err):
		return Fail(err)
	}
	rec := c.Spec.Bootstrap.Recovery
	what := "backup " + rec.Backup
	if rec.TargetTime != "" {
		what = "the state at " + rec.TargetTime
	}
	waiting := fmt.Sprintf("restoring %s from %s into %s (Job %s); the storage pods start after it", what, rec.SourceBucketURL, c.Spec.Bucket.URL, job.Name)
	existing := &batchv1.Job{}
	err = r.Get(ctx, client.ObjectKeyFromObject(job), existing)
	if apierrors.IsNotFound(err) {
		if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
			return Fail(err)
		}
		r.Recorder.Eventf(c, job, corev1.EventTypeNormal, kvapi.ReasonRestoring, "Restore", "%s", waiting)
		return Wait(kvapi.ReasonRestoring, waiting, restorePoll)
	}
	if err != nil {
		return Fail(err)
	}
	for _, cond := range existing.Status.Conditions {
		if cond.Status != corev1.ConditionTrue {
			continue
		}
		switch cond.Type {
		case batchv1.JobComplete:
			return Continue()
		case batchv1.JobFailed:
			return Fail(fmt.Errorf("the restore of %s from %s failed (Job %s: %s): the storage pods start only from it; `kubectl logs job/%s` says why; "+
				"fix the cause, empty the bucket %s if the restore wrote into it, and delete the Job to run it again",
				what, rec.SourceBucketURL, job.Name, cond.Message, job.Name, c.Spec.Bucket.URL))
		}
	}
	return Wait(kvapi.ReasonRestoring, waiting, restorePoll)
}

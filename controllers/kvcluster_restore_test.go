package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

// finishJob plays the Job controller: the restore Job ends with cond
// (Complete or Failed), with the conditions the API server requires first.
func finishJob(g *WithT, key client.ObjectKey, cond batchv1.JobConditionType, msg string) {
	ctx := context.Background()
	job := &batchv1.Job{}
	g.Expect(k8sClient.Get(ctx, key, job)).To(Succeed())
	now := metav1.Now()
	job.Status.StartTime = &now
	if cond == batchv1.JobComplete {
		job.Status.CompletionTime = &now
		job.Status.Succeeded = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	} else {
		job.Status.Failed = 3
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded", Message: msg},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded", Message: msg}}
	}
	g.Expect(k8sClient.Status().Update(ctx, job)).To(Succeed())
}

// A KVCluster with bootstrap.recovery runs a restore Job (bellows restore
// from the source bucket into its own, as the storage pods would run,
// with their bucket credentials) and creates no StatefulSet until the Job
// completed: Progressing says Restoring meanwhile. A failed restore is
// Degraded, saying how to retry, and still no store starts.
func TestARecoveryClusterStartsOnlyAfterItsRestore(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)

	newCluster := func(name string) *kvapi.KVCluster {
		c := &kvapi.KVCluster{}
		loadSample(t, "kv_v1alpha1_kvcluster.yaml", c, ns)
		c.Name = name
		c.Spec.CompactionPoolRef = nil
		c.Spec.Engine.Offload = "Disabled"
		c.Spec.Bucket.URL = "s3://" + name
		c.Spec.Bootstrap = &kvapi.BootstrapSpec{Recovery: &kvapi.RecoverySpec{Backup: "demo-first", SourceBucketURL: "s3://demo"}}
		g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
		return c
	}
	c := newCluster("restored")
	jobKey := client.ObjectKey{Namespace: ns, Name: "restored-restore"}
	g.Eventually(func(g Gomega) {
		job := &batchv1.Job{}
		g.Expect(k8sClient.Get(ctx, jobKey, job)).To(Succeed())
		ctr := job.Spec.Template.Spec.Containers[0]
		g.Expect(ctr.Args).To(Equal([]string{"restore", "--from", "s3://demo", "--backup", "demo-first", "--to", "s3://restored"}))
		g.Expect(ctr.EnvFrom).To(Equal([]corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *c.Spec.Bucket.CredentialsSecretRef}}}))
		g.Expect(*ctr.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
		g.Expect(metav1.IsControlledBy(job, c)).To(BeTrue())
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(c), got)).To(Succeed())
		p := condition(got.Status.Conditions, kvapi.ConditionProgressing)
		g.Expect(p.Reason).To(Equal(kvapi.ReasonRestoring))
		g.Expect(p.Message).To(ContainSubstring("restoring backup demo-first from s3://demo into s3://restored"))
	}).Should(Succeed())
	// Held: no storage pod starts on the bucket being restored into.
	g.Consistently(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "restored"}, &appsv1.StatefulSet{}))
	}, 2*time.Second, poll).Should(BeTrue())

	finishJob(g, jobKey, batchv1.JobComplete, "")
	g.Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "restored"}, &appsv1.StatefulSet{})
	}).Should(Succeed())

	newCluster("broken")
	brokenJob := client.ObjectKey{Namespace: ns, Name: "broken-restore"}
	g.Eventually(func() error { return k8sClient.Get(ctx, brokenJob, &batchv1.Job{}) }).Should(Succeed())
	finishJob(g, brokenJob, batchv1.JobFailed, "Job has reached the specified backoff limit")
	g.Eventually(func(g Gomega) {
		got := &kvapi.KVCluster{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "broken"}, got)).To(Succeed())
		d := condition(got.Status.Conditions, kvapi.ConditionDegraded)
		g.Expect(d.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(d.Message).To(ContainSubstring("the restore of backup demo-first from s3://demo failed"))
		g.Expect(d.Message).To(ContainSubstring("kubectl logs job/broken-restore"))
	}).Should(Succeed())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "broken"}, &appsv1.StatefulSet{}))).To(BeTrue())
}

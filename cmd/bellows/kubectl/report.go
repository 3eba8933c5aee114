package kubectl

import (
	"archive/zip"
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/bellows-kv/bellows/internal/contract"
)

// ReportOptions say what a report holds besides the resources.
type ReportOptions struct {
	// Logs: include the containers' logs, of the last LogsSince (0: all
	// the kubelet kept), and the previous container's of restarted ones.
	Logs      bool
	LogsSince time.Duration
	// OperatorNamespace is where to look for the operator's pods; empty:
	// every namespace.
	OperatorNamespace string
}

// Report writes a zip of what support needs to see of the KVCluster name,
// as `kubectl cnpg report cluster` does: the KVCluster and its
// CompactionPool, the objects the operator made for them (never Secrets),
// their pods and events, the operator's pods, and the logs of all of
// them. What could not be read is listed in README.txt rather than
// failing the report, since a report is most wanted when things are
// broken.
func (k *Kube) Report(ctx context.Context, name string, w io.Writer, opts ReportOptions) error {
	st, err := k.Status(ctx, name, -1)
	if err != nil {
		return err
	}
	z := zip.NewWriter(w)
	r := &report{k: k, z: z, now: time.Now(), opts: opts}
	c := st.Cluster
	r.object("kvcluster.yaml", c)
	if st.Pool != nil {
		r.object("compactionpool.yaml", st.Pool)
	} else if st.PoolMissing != "" {
		r.problem(fmt.Sprintf("compactionPoolRef names CompactionPool %q, which does not exist", st.PoolMissing))
	}
	instances := []string{c.Name}
	if st.Pool != nil {
		instances = append(instances, st.Pool.Name)
	}
	r.children(ctx, c.Namespace, instances)
	pods := append(slices.Clone(st.Stores), st.Workers...)
	r.object("pods.yaml", &corev1.PodList{Items: pods})
	r.object("events.yaml", &corev1.EventList{Items: st.Events})
	operators := r.operatorPods(ctx)
	if len(operators) > 0 {
		r.object("operator/pods.yaml", &corev1.PodList{Items: operators})
	}
	if opts.Logs {
		for _, p := range pods {
			r.logs(ctx, "logs/"+p.Name, p)
		}
		for _, p := range operators {
			r.logs(ctx, "operator/logs/"+p.Name, p)
		}
	}
	r.readme(c.Namespace + "/" + c.Name)
	if r.err != nil {
		return r.err
	}
	return z.Close()
}

type report struct {
	k        *Kube
	z        *zip.Writer
	now      time.Time
	opts     ReportOptions
	entries  []string
	problems []string
	err      error // writing the zip failed: nothing more is worth doing
}

func (r *report) file(name string, write func(io.Writer) error) {
	if r.err != nil {
		return
	}
	f, err := r.z.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: r.now})
	if err == nil {
		err = write(f)
	}
	if err != nil {
		r.err = fmt.Errorf("writing %s into the report: %w", name, err)
		return
	}
	r.entries = append(r.entries, name)
}

func (r *report) problem(p string) { r.problems = append(r.problems, p) }

// object writes obj as YAML, with its apiVersion and kind (the typed
// client leaves them out).
func (r *report) object(name string, obj runtime.Object) {
	obj = obj.DeepCopyObject()
	if gvk, err := apiutil.GVKForObject(obj, r.k.Client.Scheme()); err == nil {
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
	b, err := yaml.Marshal(obj)
	if err != nil {
		r.problem(fmt.Sprintf("%s: %v", name, err))
		return
	}
	r.file(name, func(w io.Writer) error { _, err := w.Write(b); return err })
}

// children writes what the operator made for the cluster and the pool:
// the objects labelled with their instance names.
func (r *report) children(ctx context.Context, ns string, instances []string) {
	for _, kind := range []struct {
		file string
		list client.ObjectList
	}{
		{"statefulsets.yaml", &appsv1.StatefulSetList{}},
		{"deployments.yaml", &appsv1.DeploymentList{}},
		{"services.yaml", &corev1.ServiceList{}},
		{"configmaps.yaml", &corev1.ConfigMapList{}},
		{"poddisruptionbudgets.yaml", &policyv1.PodDisruptionBudgetList{}},
		{"persistentvolumeclaims.yaml", &corev1.PersistentVolumeClaimList{}},
	} {
		var all []runtime.Object
		for _, inst := range instances {
			list := kind.list.DeepCopyObject().(client.ObjectList)
			if err := r.k.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{contract.LabelInstance: inst}); err != nil {
				r.problem(fmt.Sprintf("%s: %v", kind.file, err))
				continue
			}
			all = append(all, list)
		}
		if len(all) > 0 {
			r.objects(kind.file, all)
		}
	}
}

// objects writes several lists as one YAML stream.
func (r *report) objects(name string, lists []runtime.Object) {
	var docs []string
	for _, l := range lists {
		if gvk, err := apiutil.GVKForObject(l, r.k.Client.Scheme()); err == nil {
			l.GetObjectKind().SetGroupVersionKind(gvk)
		}
		b, err := yaml.Marshal(l)
		if err != nil {
			r.problem(fmt.Sprintf("%s: %v", name, err))
			continue
		}
		docs = append(docs, string(b))
	}
	r.file(name, func(w io.Writer) error { _, err := io.WriteString(w, strings.Join(docs, "---\n")); return err })
}

// operatorPods are the Bellows operator's pods (the chart's labels), in
// OperatorNamespace or, where the user may list them, every namespace.
func (r *report) operatorPods(ctx context.Context) []corev1.Pod {
	var list corev1.PodList
	opts := []client.ListOption{client.MatchingLabels{contract.LabelName: contract.AppName, contract.LabelComponent: "operator"}}
	if r.opts.OperatorNamespace != "" {
		opts = append(opts, client.InNamespace(r.opts.OperatorNamespace))
	}
	if err := r.k.Client.List(ctx, &list, opts...); err != nil {
		r.problem(fmt.Sprintf("the operator's pods: %v (give --operator-namespace where it runs)", err))
		return nil
	}
	if len(list.Items) == 0 {
		r.problem("no operator pods found (labels app.kubernetes.io/name=bellows, app.kubernetes.io/component=operator)")
	}
	return list.Items
}

// logs writes each container's log, and the previous one's after a
// restart: what it printed before it crashed.
func (r *report) logs(ctx context.Context, dir string, p corev1.Pod) {
	restarts := map[string]int32{}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		restarts[cs.Name] = cs.RestartCount
	}
	containers := append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...)
	for _, ctr := range containers {
		r.log(ctx, path.Join(dir, ctr.Name+".log"), p, ctr.Name, false)
		if restarts[ctr.Name] > 0 {
			r.log(ctx, path.Join(dir, ctr.Name+".previous.log"), p, ctr.Name, true)
		}
	}
}

func (r *report) log(ctx context.Context, name string, p corev1.Pod, container string, previous bool) {
	o := &corev1.PodLogOptions{Container: container, Previous: previous, Timestamps: true}
	if r.opts.LogsSince > 0 {
		secs := int64(r.opts.LogsSince.Seconds())
		o.SinceSeconds = &secs
	}
	rc, err := r.k.Core.CoreV1().Pods(p.Namespace).GetLogs(p.Name, o).Stream(ctx)
	if err != nil {
		r.problem(fmt.Sprintf("%s: %v", name, err))
		return
	}
	defer rc.Close()
	r.file(name, func(w io.Writer) error { _, err := io.Copy(w, rc); return err })
}

// readme lists what the report holds and what could not be read.
func (r *report) readme(cluster string) {
	var b strings.Builder
	fmt.Fprintf(&b, "Bellows report of KVCluster %s, %s (kubectl bellows report)\n\n", cluster, r.now.UTC().Format(time.RFC3339))
	b.WriteString("Entries:\n")
	for _, e := range r.entries {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	if len(r.problems) > 0 {
		b.WriteString("\nNot included (could not be read):\n")
		for _, p := range r.problems {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	r.file("README.txt", func(w io.Writer) error { _, err := io.WriteString(w, b.String()); return err })
}

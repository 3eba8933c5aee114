package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/cmd/bellows/kubectl"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/backup"
)

// KubectlPluginName is the executable name kubectl runs for `kubectl
// bellows`: the bellows binary, linked or copied under this name, serves
// the plugin (main dispatches on it).
const KubectlPluginName = "kubectl-bellows"

// kubectlFlags are the flags every plugin command shares: kubectl's own
// connection flags (--kubeconfig, --context, -n...), as every kubectl plugin
// takes them, and the command's bound.
type kubectlFlags struct {
	config  *genericclioptions.ConfigFlags
	timeout time.Duration
}

// connect bounds the command by --timeout and connects to the cluster.
func (f *kubectlFlags) connect(cmd *cobra.Command) (context.Context, context.CancelFunc, *kubectl.Kube, error) {
	ctx, cancel, err := commandContext(cmd.Context(), f.timeout)
	if err != nil {
		return nil, nil, nil, err
	}
	k, err := kubectl.Connect(f.config)
	if err != nil {
		cancel()
		return nil, nil, nil, &userError{what: err.Error(), hint: "give --kubeconfig FILE, or set KUBECONFIG, as for kubectl", cause: err}
	}
	return ctx, cancel, k, nil
}

// NewKubectlCommand is the kubectl plugin's command tree, named use:
// kubectl-bellows as the plugin, kubectl under `bellows`.
func NewKubectlCommand(use string) *cobra.Command {
	f := &kubectlFlags{config: genericclioptions.NewConfigFlags(true)}
	cmd := &cobra.Command{
		Use:   use,
		Short: "kubectl plugin: status, regions, flush, compact, backups, watches and support reports of KVClusters",
		Long: `Inspect and operate Bellows KVClusters through the Kubernetes API, as
kubectl cnpg does for CloudNativePG: the cluster's and its CompactionPool's
status, its regions with their owners, sizes and load, flushes and
compactions, a watch of the changes to a key range, and a zip of everything
support needs. Stores are reached
through port-forwards by the API server, so no route to the pods is needed.

Install: put the bellows binary on your PATH as kubectl-bellows (make
kubectl-plugin links bin/kubectl-bellows), then run kubectl bellows.`,
		SilenceUsage: true,
		PersistentPreRun: func(*cobra.Command, []string) {
			// client-go logs through klog, as errors, each port-forward
			// connection the plugin closes when done with it; what does
			// matter reaches the command as the call's error, with what
			// the forward said (Store.Explain).
			klog.SetLogger(logr.Discard())
		},
	}
	if use == KubectlPluginName {
		cmd.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl bellows"}
		cmd.AddCommand(newVersionCommand())
	}
	f.config.AddFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().DurationVar(&f.timeout, "timeout", 60*time.Second, "per-command timeout (0: none; Ctrl-C still stops)")
	cmd.AddCommand(newKubectlStatusCommand(f), newKubectlRegionsCommand(f), newKubectlFlushCommand(f),
		newKubectlCompactCommand(f), newKubectlBackupCommand(f), newKubectlBackupsCommand(f), newKubectlReportCommand(f),
		newKubectlWatchCommand(f))
	refuseUnknownSubcommands(cmd)
	return cmd
}

// clusterArg is the optional CLUSTER argument.
func clusterArg(args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	return ""
}

// kubeError explains the plugin's errors: what is missing and what to do.
func (f *kubectlFlags) kubeError(err error) error { return kubeError(err, f.timeout) }

// kubeError is the explanation of err for a command run with --timeout
// timeout.
func kubeError(err error, timeout time.Duration) error {
	var nf *kubectl.NotFoundError
	var nr *kubectl.NoReadyStoreError
	var rn *kubectl.RegionNotFoundError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nf):
		return &userError{what: err.Error(), hint: "`kubectl get kvclusters -A` lists them in every namespace", cause: err}
	case errors.As(err, &nr), errors.As(err, &rn):
		return &userError{what: err.Error(), cause: err}
	}
	return explain(err, timeout)
}

func newKubectlStatusCommand(f *kubectlFlags) *cobra.Command {
	var output string
	var events int
	cmd := &cobra.Command{
		Use:   "status [CLUSTER]",
		Short: "The KVCluster's and its CompactionPool's status: conditions, stores, workers, regions and recent events",
		Long: `The KVCluster's and its CompactionPool's status as the operator last wrote
it, their pods, and recent events. CLUSTER may be left out when the
namespace has one KVCluster. Exit status 1 unless the cluster is Ready.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" && output != "yaml" {
				return fmt.Errorf("-o %q: want text, json or yaml", output)
			}
			ctx, cancel, k, err := f.connect(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			st, err := k.Status(ctx, clusterArg(args), events)
			if err != nil {
				return f.kubeError(err)
			}
			// What the operator's status cannot say yet: regions whose
			// store died, asked of the stores, within part of --timeout.
			rctx, rcancel := context.WithTimeout(ctx, statusRegionsTimeout)
			var none *kubectl.NoReadyStoreError // the pods below say why
			if st.FailingOver, err = k.FailingOver(rctx, st.Cluster); err != nil && !errors.As(err, &none) {
				st.RegionsUnread = err.Error()
			}
			rcancel()
			if err := printStatus(cmd.OutOrStdout(), output, st, time.Now()); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(st.Cluster.Status.Conditions, kvapi.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
				return &userError{what: fmt.Sprintf("KVCluster %s is not Ready", st.Cluster.Name)}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, json or yaml (the resources, pods and events as the API has them)")
	cmd.Flags().IntVar(&events, "events", 10, "show at most this many recent events (-1: all)")
	return cmd
}

// statusRegionsTimeout bounds status's questions to the stores: a store
// that does not answer leaves the rest of the status to be shown.
const statusRegionsTimeout = 10 * time.Second

// printStatus writes st as text for people, or as JSON or YAML.
func printStatus(w io.Writer, format string, st *kubectl.Status, now time.Time) error {
	switch format {
	case "json":
		b, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(st)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	c := st.Cluster
	s := c.Status
	fmt.Fprintf(tw, "KVCluster:\t%s (namespace %s)\n", c.Name, c.Namespace)
	if c.IsPaused() {
		fmt.Fprintf(tw, "Paused:\tyes: the operator leaves it alone\n")
	}
	fmt.Fprintf(tw, "Stores:\t%d/%d ready, %d updated (spec: %d)\n", s.ReadyReplicas, s.Replicas, s.UpdatedReplicas, c.Spec.Replicas)
	fmt.Fprintf(tw, "Regions:\t%d\n", s.Regions)
	if s.ObservedGeneration != c.Generation {
		fmt.Fprintf(tw, "Observed:\tgeneration %d of %d: the operator has not caught up with the latest spec\n", s.ObservedGeneration, c.Generation)
	}
	printConditions(tw, s.Conditions, now)
	if len(s.RegionAssignment) > 0 {
		fmt.Fprintf(tw, "\nRegion assignment:\nPOD\tCOUNT\tREGIONS\n")
		for _, a := range s.RegionAssignment {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", a.Pod, a.Count, a.Regions)
		}
	}
	switch {
	case len(st.FailingOver) > 0:
		fmt.Fprintf(tw, "\nFailing over (their store's liveness lease ran out; the cluster moves them to live stores):\nREGION\tSTATE\tFROM\n")
		for _, f := range st.FailingOver {
			fmt.Fprintf(tw, "%s\tfailing over\tstore %s (pod %s)\n", f.Region, f.From, f.Pod)
		}
	case st.RegionsUnread != "":
		fmt.Fprintf(tw, "Failing over:\tnot known: the stores could not be asked: %s\n", st.RegionsUnread)
	}
	fmt.Fprintln(tw)
	switch {
	case st.Pool != nil:
		p := st.Pool
		ps := p.Status
		fmt.Fprintf(tw, "CompactionPool:\t%s\n", p.Name)
		desired := "-"
		if ps.DesiredReplicas != nil {
			desired = fmt.Sprint(*ps.DesiredReplicas)
		}
		fmt.Fprintf(tw, "Workers:\t%d/%d ready, desired %s (autoscaling %s)\n", ps.ReadyReplicas, ps.Replicas, desired, p.Spec.Autoscaling.Mode)
		if a := ps.Autoscaler; a != nil {
			in := a.Inputs
			fmt.Fprintf(tw, "Compaction queue:\t%s queued on the stores, backlog %s (evaluated %s ago)\n", orDash(in.Queued), orDash(in.Backlog),
				duration.HumanDuration(now.Sub(a.LastEvaluationTime.Time)))
			fmt.Fprintf(tw, "Demand:\t%s compactions per region per %ds, of %s bytes, at %s B/s\n", orDash(in.CompactionsPerRegion), in.IntervalSeconds,
				orDash(in.CompactionSizeBytes), orDash(in.CompactionRateBytesPerSecond))
			fmt.Fprintf(tw, "Compaction debt:\t%s bytes owed, oldest wait %ss, %s bytes charged (maxCompactionWait %s)\n", orDash(in.CompactionDebtBytes),
				orDash(in.OldestCompactionWaitSeconds), orDash(in.ChargedDebtBytes), orDash(string(p.Spec.Autoscaling.MaxCompactionWait)))
		}
		printConditions(tw, ps.Conditions, now)
	case st.PoolMissing != "":
		fmt.Fprintf(tw, "CompactionPool:\t%s does not exist (compactionPoolRef)\n", st.PoolMissing)
	default:
		fmt.Fprintf(tw, "CompactionPool:\tnone: the stores compact their regions themselves\n")
	}
	fmt.Fprintf(tw, "\nPods:\nNAME\tROLE\tREADY\tSTATUS\tRESTARTS\tAGE\tIP\tNODE\n")
	for _, p := range st.Stores {
		printPod(tw, "store", p, now)
	}
	for _, p := range st.Workers {
		printPod(tw, "worker", p, now)
	}
	if len(st.Events) > 0 {
		fmt.Fprintf(tw, "\nRecent events:\nAGE\tTYPE\tREASON\tOBJECT\tMESSAGE\n")
		for _, e := range st.Events {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\n", duration.HumanDuration(now.Sub(kubectl.EventTime(e))), e.Type, e.Reason,
				strings.ToLower(e.InvolvedObject.Kind), e.InvolvedObject.Name, strings.TrimSpace(e.Message))
		}
	}
	return tw.Flush()
}

func printConditions(w io.Writer, conds []metav1.Condition, now time.Time) {
	for _, c := range conds {
		fmt.Fprintf(w, "%s:\t%s\t%s: %s (%s ago)\n", c.Type, c.Status, c.Reason, c.Message, duration.HumanDuration(now.Sub(c.LastTransitionTime.Time)))
	}
}

func printPod(w io.Writer, role string, p corev1.Pod, now time.Time) {
	ready, restarts := 0, int32(0)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready {
			ready++
		}
		restarts += cs.RestartCount
	}
	status := string(p.Status.Phase)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			status = cs.State.Waiting.Reason
		}
	}
	if p.DeletionTimestamp != nil {
		status = "Terminating"
	}
	fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\t%d\t%s\t%s\t%s\n", p.Name, role, ready, len(p.Spec.Containers), status, restarts,
		duration.HumanDuration(now.Sub(p.CreationTimestamp.Time)), orDash(p.Status.PodIP), orDash(p.Spec.NodeName))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newKubectlRegionsCommand(f *kubectlFlags) *cobra.Command {
	var output string
	var hex bool
	cmd := &cobra.Command{
		Use:   "regions [CLUSTER]",
		Short: "The cluster's regions: owner pod, size, memstore, WAL, load, compaction and warmup, asked of every Ready store",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := newPrinter(cmd.OutOrStdout(), output, codec{hex: hex}, regionHeader...)
			if err != nil {
				return err
			}
			ctx, cancel, k, err := f.connect(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			c, err := k.Cluster(ctx, clusterArg(args))
			if err != nil {
				return f.kubeError(err)
			}
			regions, skipped, err := k.Regions(ctx, c)
			if err != nil {
				return f.kubeError(err)
			}
			for _, s := range skipped {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: not asked: %s; its regions are missing or shown with no owner\n", s.Pod, s.Why)
			}
			return printRegions(p, regions)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: "+strings.Join(outputFormats, ", "))
	cmd.Flags().BoolVar(&hex, "hex", false, "show the key ranges in hexadecimal")
	return cmd
}

// onOwners runs fn on the store pod owning each region named (all the
// cluster's with none), one region at a time.
func onOwners(cmd *cobra.Command, f *kubectlFlags, args []string, fn func(ctx context.Context, pod, region string, admin kvpb.AdminClient) error) error {
	ctx, cancel, k, err := f.connect(cmd)
	if err != nil {
		return err
	}
	defer cancel()
	c, err := k.Cluster(ctx, args[0])
	if err != nil {
		return f.kubeError(err)
	}
	regions, skipped, err := k.Regions(ctx, c)
	if err != nil {
		return f.kubeError(err)
	}
	var names []string
	if len(args) > 1 {
		names = args[1:]
	} else {
		for _, r := range regions {
			names = append(names, r.Name)
		}
		for _, s := range skipped {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: not asked: %s; its regions are left out\n", s.Pod, s.Why)
		}
	}
	// One forward per pod, however many of its regions are named.
	stores := map[string]*kubectl.Store{}
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	for _, name := range names {
		pod, err := kubectl.Owner(c, regions, name)
		if err != nil {
			return f.kubeError(err)
		}
		s := stores[pod]
		if s == nil {
			if s, err = k.DialStore(ctx, c, pod); err != nil {
				return f.kubeError(err)
			}
			stores[pod] = s
		}
		if err := s.Explain(fn(ctx, pod, name, kvpb.NewAdminClient(s.Conn))); err != nil {
			return f.kubeError(fmt.Errorf("%s at %s: %w", name, pod, err))
		}
	}
	return nil
}

func newKubectlFlushCommand(f *kubectlFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "flush CLUSTER [REGION...]",
		Short: "Flush regions' memstores into SSTs (every region without REGION), at the store pod that owns each",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onOwners(cmd, f, args, func(ctx context.Context, pod, region string, admin kvpb.AdminClient) error {
				if _, err := admin.Flush(ctx, &kvpb.FlushRequest{Region: region}); err != nil {
					return err
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "OK flushed %s (at %s)\n", region, pod)
				return err
			})
		},
	}
}

func newKubectlCompactCommand(f *kubectlFlags) *cobra.Command {
	var major bool
	var startTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "compact CLUSTER [REGION...]",
		Short: "Compact regions (every region without REGION), minor unless --major, at the store pod that owns each; runs where its offload mode says",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onOwners(cmd, f, args, func(ctx context.Context, pod, region string, admin kvpb.AdminClient) error {
				r, err := admin.Compact(ctx, &kvpb.CompactRequest{Region: region, Major: major, StartTimeoutMs: startTimeout.Milliseconds()})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if !r.Compacted {
					_, err = fmt.Fprintf(out, "OK %s (at %s): nothing to compact\n", region, pod)
					return err
				}
				where := r.Location
				if r.Note != "" {
					where += ": " + r.Note
				}
				_, err = fmt.Fprintf(out, "OK %s (at %s): %d files (%d bytes) -> %s, ran %s\n", region, pod, len(r.Inputs), r.InputBytes, r.Output, where)
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&major, "major", false, "a major compaction (every file into one) instead of the policy's minor selection")
	cmd.Flags().DurationVar(&startTimeout, "start-timeout", 0, "with offload Required: give up, saying why, if no worker starts a compaction within this (0: wait)")
	return cmd
}

func newKubectlReportCommand(f *kubectlFlags) *cobra.Command {
	var file string
	var opts kubectl.ReportOptions
	cmd := &cobra.Command{
		Use:   "report CLUSTER [-f FILE.zip]",
		Short: "Write a zip for support: the KVCluster, its CompactionPool, their objects, pods, events and logs, and the operator's",
		Long: `Write a zip of what support needs to see, as kubectl cnpg report does: the
KVCluster and its CompactionPool, the objects the operator made for them
(never Secrets), their pods and events, the operator's pods, and the logs
of all of them (the previous container's too after a restart). README.txt
in the zip lists its entries and what could not be read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				file = fmt.Sprintf("report_kvcluster_%s_%s.zip", args[0], time.Now().UTC().Format("2006-01-02T15-04-05Z"))
			}
			ctx, cancel, k, err := f.connect(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			// Written beside, then renamed: no half report under the name.
			tmp, err := os.CreateTemp(filepath.Dir(file), ".report-*.zip")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			err = k.Report(ctx, args[0], tmp, opts)
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return f.kubeError(err)
			}
			if err := os.Rename(tmp.Name(), file); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", file)
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the zip to write (default report_kvcluster_CLUSTER_TIME.zip)")
	cmd.Flags().BoolVar(&opts.Logs, "logs", true, "include the pods' logs")
	cmd.Flags().DurationVar(&opts.LogsSince, "logs-since", 0, "only logs newer than this (0: all the kubelet kept)")
	cmd.Flags().StringVar(&opts.OperatorNamespace, "operator-namespace", "", "where the operator runs (default: look in every namespace)")
	return cmd
}

// onAnyStore runs fn with the Admin API of the first ready store pod of
// cluster args[0], through a port-forward.
func onAnyStore(cmd *cobra.Command, f *kubectlFlags, cluster string, fn func(ctx context.Context, pod string, admin kvpb.AdminClient) error) error {
	ctx, cancel, k, err := f.connect(cmd)
	if err != nil {
		return err
	}
	defer cancel()
	c, err := k.Cluster(ctx, cluster)
	if err != nil {
		return f.kubeError(err)
	}
	pods, err := k.StorePods(ctx, c)
	if err != nil {
		return f.kubeError(err)
	}
	var states []string
	for _, p := range pods {
		if !kubectl.PodReady(&p) {
			states = append(states, p.Name+" "+string(p.Status.Phase))
			continue
		}
		s, err := k.DialStore(ctx, c, p.Name)
		if err != nil {
			return f.kubeError(err)
		}
		defer s.Close()
		if err := s.Explain(fn(ctx, p.Name, kvpb.NewAdminClient(s.Conn))); err != nil {
			return f.kubeError(fmt.Errorf("at %s: %w", p.Name, err))
		}
		return nil
	}
	return f.kubeError(&kubectl.NoReadyStoreError{Cluster: c.Name, Namespace: c.Namespace, Pods: states})
}

func newKubectlBackupCommand(f *kubectlFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "backup CLUSTER [ID]",
		Short: "Take a backup of the cluster now, in its bucket (ID: backup-<UTC time> unless given); a store pod drives it",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := backup.NewID(time.Now())
			if len(args) == 2 {
				id = args[1]
			}
			if err := backup.CheckID(id); err != nil {
				return err
			}
			return onAnyStore(cmd, f, args[0], func(ctx context.Context, pod string, admin kvpb.AdminClient) error {
				resp, err := admin.Backup(ctx, &kvpb.BackupRequest{Id: id})
				if err != nil {
					return err
				}
				var rec backup.Backup
				if err := json.Unmarshal(resp.BackupJson, &rec); err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "OK backup %s at ts %d (%s): %d regions, %d files, %s (%s copied), taken by %s\n",
					rec.ID, rec.TS, backup.FormatTS(rec.TS), len(rec.Regions), rec.Files(), bytesCell(rec.Bytes()), bytesCell(rec.CopiedBytes), pod)
				return err
			})
		},
	}
}

func newKubectlBackupsCommand(f *kubectlFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "backups CLUSTER",
		Short: "List the cluster's backups, oldest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onAnyStore(cmd, f, args[0], func(ctx context.Context, _ string, admin kvpb.AdminClient) error {
				resp, err := admin.ListBackups(ctx, &kvpb.ListBackupsRequest{})
				if err != nil {
					return err
				}
				var all []backup.Backup
				if err := json.Unmarshal(resp.BackupsJson, &all); err != nil {
					return err
				}
				return printBackups(cmd.OutOrStdout(), all, resp.Running)
			})
		},
	}
}

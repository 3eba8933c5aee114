package controllers

// The Backup controller takes each Backup once (docs/backup.md): it waits
// for the KVCluster to be Ready, then asks a storage pod, through the
// cluster's client Service, to take the backup (Admin.Backup), which runs
// in the store and writes the record in the cluster's bucket. The call is
// synchronous and may take minutes; the phase is Running meanwhile, so an
// operator that restarts mid-backup asks again with the same ID: a backup
// recorded by the first attempt answers ALREADY_EXISTS, and is adopted
// from the bucket's list; an unrecorded one is taken again (its copies are
// shared, not doubled).

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// +kubebuilder:rbac:groups=kv.bellows.dev,resources=backups,verbs=get;list;watch
// +kubebuilder:rbac:groups=kv.bellows.dev,resources=backups/status,verbs=update

// backupTimeout bounds one Admin.Backup call.
const backupTimeout = 30 * time.Minute

// backupWaitForCluster is how often a Pending Backup looks at its cluster.
const backupWaitForCluster = 10 * time.Second

// BackupReconciler reconciles Backups.
type BackupReconciler struct {
	client.Client
	// APIReader reads around the cache (nil: the manager's).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// StoreAddr is the gRPC address through which the operator reaches a
	// storage pod of c; nil: its client Service's cluster IP and port.
	StoreAddr func(c *kvapi.KVCluster) string
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	credentials operatorCredentials
}

// clockNow is now() of a reconciler whose clock is now (nil: time.Now).
func clockNow(now func() time.Time) time.Time {
	if now != nil {
		return now()
	}
	return time.Now()
}

func (r *BackupReconciler) now() time.Time { return clockNow(r.Now) }

// storeAdmin reaches the Admin API of a KVCluster's storage pods: the one
// way both backup reconcilers call a store.
type storeAdmin struct {
	reader client.Reader
	// override, when set, replaces the client Service's address.
	override func(c *kvapi.KVCluster) string
	// certs and creds give the operator's client certificate for a
	// cluster with TLS. Certificates are issued on the real clock, not on
	// a reconciler's (a test's schedule clock may be a day ahead).
	certs certificates
	creds *operatorCredentials
}

func (r *BackupReconciler) stores() storeAdmin {
	return storeAdmin{reader: r.Client, override: r.StoreAddr, certs: certificates{client: r.Client}, creds: &r.credentials}
}

// addr is where the operator reaches a storage pod of c: its client
// Service's cluster IP (the Service load-balances to Ready pods), which
// needs no cluster DNS; the Service's DNS name when it has no cluster IP.
func (s storeAdmin) addr(ctx context.Context, c *kvapi.KVCluster) string {
	if s.override != nil {
		return s.override(c)
	}
	host := c.ClientServiceName() + "." + c.Namespace + ".svc"
	var svc corev1.Service
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.ClientServiceName()}, &svc); err == nil &&
		svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		host = svc.Spec.ClusterIP
	}
	return net.JoinHostPort(host, strconv.Itoa(contract.StoreGRPCPort))
}

// call runs fn with the Admin API of a storage pod of c, within
// backupTimeout. A connection that cannot be made is UNAVAILABLE.
func (s storeAdmin) call(ctx context.Context, c *kvapi.KVCluster, fn func(ctx context.Context, admin kvpb.AdminClient) error) error {
	transport := insecure.NewCredentials()
	if c.Spec.TLS.TLSEnabled() {
		cfg, err := s.creds.forMode(ctx, s.certs, c.Namespace, c.Spec.TLS.Mode, c.ClientTLSSecretName("admin"))
		if err != nil {
			return fmt.Errorf("the operator's client certificate for %s: %w", c.Namespace, err)
		}
		transport = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(s.addr(ctx, c), grpc.WithTransportCredentials(transport),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(contract.MaxMessageBytes)))
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, backupTimeout)
	defer cancel()
	return fn(ctx, kvpb.NewAdminClient(conn))
}

// Reconcile implements reconcile.Reconciler.
func (r *BackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b kvapi.Backup
	if err := r.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if b.Status.Phase == kvapi.BackupRunning && r.APIReader != nil {
		// The cache may not have this controller's own last write yet
		// (Completed): a backup is not asked for twice on a stale read.
		if err := r.APIReader.Get(ctx, req.NamespacedName, &b); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	switch b.Status.Phase {
	case kvapi.BackupCompleted, kvapi.BackupFailed:
		return ctrl.Result{}, nil
	}
	var c kvapi.KVCluster
	err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.Cluster.Name}, &c)
	if apierrors.IsNotFound(err) {
		return r.pending(ctx, &b, kvapi.ReasonClusterNotFound, fmt.Sprintf("no KVCluster %q in namespace %q: create it, or fix spec.cluster.name", b.Spec.Cluster.Name, b.Namespace))
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if !meta.IsStatusConditionTrue(c.Status.Conditions, kvapi.ConditionReady) {
		return r.pending(ctx, &b, kvapi.ReasonClusterNotReady, fmt.Sprintf("KVCluster %s is not Ready yet", c.Name))
	}
	if b.Status.Phase != kvapi.BackupRunning {
		now := metav1.NewTime(r.now())
		b.Status.Phase, b.Status.BackupID, b.Status.StartedAt, b.Status.Message = kvapi.BackupRunning, b.Name, &now, ""
		setCondition(&b.Status.Conditions, b.Generation, kvapi.ConditionCompleted, false, kvapi.ReasonBackupRunning,
			fmt.Sprintf("a storage pod of %s is taking the backup", c.Name))
		if err := r.Status().Update(ctx, &b); err != nil {
			return ctrl.Result{}, err
		}
		r.Recorder.Eventf(&b, &c, corev1.EventTypeNormal, kvapi.ReasonBackupRunning, "Backup", "taking backup %s of %s", b.Name, c.Name)
	}
	rec, err := r.take(ctx, &c, b.Name)
	switch code := status.Code(err); {
	case err == nil:
		return ctrl.Result{}, r.completed(ctx, &b, &c, rec)
	case code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Canceled:
		// The store or its Service is not reachable now, or a region's
		// owner was not for long enough: Running, tried again.
		b.Status.Message = fmt.Sprintf("trying again: %v", err)
		setCondition(&b.Status.Conditions, b.Generation, kvapi.ConditionCompleted, false, kvapi.ReasonStoreUnavailable, truncate(b.Status.Message, maxEventNote))
		return ctrl.Result{RequeueAfter: backupWaitForCluster}, r.Status().Update(ctx, &b)
	default:
		now := metav1.NewTime(r.now())
		b.Status.Phase, b.Status.StoppedAt, b.Status.Message = kvapi.BackupFailed, &now, err.Error()
		setCondition(&b.Status.Conditions, b.Generation, kvapi.ConditionCompleted, false, kvapi.ReasonBackupFailed, truncate(err.Error(), maxEventNote))
		r.Recorder.Eventf(&b, &c, corev1.EventTypeWarning, kvapi.ReasonBackupFailed, "Backup", "%s", truncate(err.Error(), maxEventNote))
		return ctrl.Result{}, r.Status().Update(ctx, &b)
	}
}

func (r *BackupReconciler) pending(ctx context.Context, b *kvapi.Backup, reason, msg string) (ctrl.Result, error) {
	if b.Status.Phase != kvapi.BackupPending || b.Status.Message != msg {
		b.Status.Phase, b.Status.Message = kvapi.BackupPending, msg
		setCondition(&b.Status.Conditions, b.Generation, kvapi.ConditionCompleted, false, reason, msg)
		if err := r.Status().Update(ctx, b); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: backupWaitForCluster}, nil
}

func (r *BackupReconciler) completed(ctx context.Context, b *kvapi.Backup, c *kvapi.KVCluster, rec backupRecord) error {
	now := metav1.NewTime(r.now())
	at := metav1.NewTime(time.Unix(0, rec.TS).UTC())
	b.Status.Phase, b.Status.StoppedAt, b.Status.Message = kvapi.BackupCompleted, &now, ""
	b.Status.TS, b.Status.Time = rec.TS, &at
	b.Status.Regions, b.Status.Files = int32(len(rec.Regions)), int32(rec.files())
	b.Status.Bytes, b.Status.CopiedBytes = rec.bytes(), rec.CopiedBytes
	msg := fmt.Sprintf("backup %s of %s at %s: %d regions, %d files, %d bytes (%d copied)", b.Name, c.Name, at.Format(time.RFC3339Nano),
		b.Status.Regions, b.Status.Files, b.Status.Bytes, b.Status.CopiedBytes)
	setCondition(&b.Status.Conditions, b.Generation, kvapi.ConditionCompleted, true, kvapi.ReasonBackupCompleted, msg)
	if err := r.Status().Update(ctx, b); err != nil {
		return err
	}
	r.Recorder.Eventf(b, c, corev1.EventTypeNormal, kvapi.ReasonBackupCompleted, "Backup", "%s", msg)
	return nil
}

// backupRecord is the part of a backup's record (storage-engine/backup's
// Backup, as JSON) the status shows: the operator does not link the engine.
type backupRecord struct {
	ID      string `json:"id"`
	TS      int64  `json:"ts"`
	Regions []struct {
		Files []struct {
			Size int64 `json:"size"`
		} `json:"files"`
	} `json:"regions"`
	CopiedBytes int64 `json:"copiedBytes"`
}

func (b backupRecord) files() int {
	n := 0
	for _, r := range b.Regions {
		n += len(r.Files)
	}
	return n
}

func (b backupRecord) bytes() int64 {
	var n int64
	for _, r := range b.Regions {
		for _, f := range r.Files {
			n += f.Size
		}
	}
	return n
}

// take asks a storage pod of c to take backup id; a backup already
// recorded under id (an earlier attempt of this Backup that the operator
// did not see finish) is read back from the bucket's list instead.
func (r *BackupReconciler) take(ctx context.Context, c *kvapi.KVCluster, id string) (rec backupRecord, err error) {
	err = r.stores().call(ctx, c, func(ctx context.Context, admin kvpb.AdminClient) error {
		resp, err := admin.Backup(ctx, &kvpb.BackupRequest{Id: id})
		if status.Code(err) == codes.AlreadyExists {
			list, lerr := admin.ListBackups(ctx, &kvpb.ListBackupsRequest{})
			if lerr != nil {
				return lerr
			}
			var all []backupRecord
			if err := json.Unmarshal(list.BackupsJson, &all); err != nil {
				return fmt.Errorf("decoding the bucket's backups: %w", err)
			}
			for _, b := range all {
				if b.ID == id {
					rec = b
					return nil
				}
			}
			return err
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal(resp.BackupJson, &rec); err != nil {
			return fmt.Errorf("decoding the backup's record: %w", err)
		}
		return nil
	})
	return rec, err
}

// SetupWithManager watches Backups (a Pending one looks at its cluster
// every backupWaitForCluster).
func (r *BackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&kvapi.Backup{}).
		Named("backup").
		Complete(r)
}

package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// DefaultShardLeaseDuration is how long a shard's claim on its ordinal
// outlives its last renewal, as a node's lease does (40 s): a shard killed
// without a word is replaced under its ordinal after at most this long.
const DefaultShardLeaseDuration = 40 * time.Second

// ErrShardClaimed is what ClaimShard returns when another live process
// holds the ordinal.
var ErrShardClaimed = errors.New("shard ordinal claimed by another process")

// ShardLeaseConfig is a shard's claim on its ordinal.
type ShardLeaseConfig struct {
	Client kubernetes.Interface
	// Namespace and Name are the Lease's: kube-node-lease and
	// "fleetlet-shard-<prefix><ordinal>" by default.
	Namespace, Name string
	// Holder names this process, unique to it: another process with the
	// same ordinal, even in a pod of the same name, has another.
	Holder string
	// Duration defaults to DefaultShardLeaseDuration.
	Duration time.Duration
	Clock    clock.WithTicker
}

// ShardLease is a shard's claim on its ordinal, held by renewing a Lease.
//
// The names of a shard's nodes follow from its ordinal, so two live
// processes with one ordinal would run the same nodes twice, each
// overwriting the other's status and leases, and every measurement would be
// wrong without a visible error. A StatefulSet never runs two pods of one
// ordinal, but a pod that lost its node may live on while its replacement
// starts, and a hand-run shard can be given any ordinal. So a shard claims
// its ordinal first, as a leader-election candidate claims leadership (one
// Lease, a holder identity per process), but it never waits in line: a
// holder that renews while it watches is a live duplicate, and it refuses
// to start; a holder that stops renewing is a dead shard it replaces.
type ShardLease struct {
	cfg   ShardLeaseConfig
	lease *coordinationv1.Lease
}

// ClaimShard takes the Lease of cfg for cfg.Holder: at once when nobody
// holds it (or it is ours), else once the other holder's last renewal is
// older than its lease duration as this process watched it. If the other
// holder renews meanwhile it returns an error wrapping ErrShardClaimed.
func ClaimShard(ctx context.Context, cfg ShardLeaseConfig) (*ShardLease, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = DefaultShardLeaseDuration
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	l := &ShardLease{cfg: cfg}
	leases := cfg.Client.CoordinationV1().Leases(cfg.Namespace)
	// observed is the other holder's lease as first seen, and when.
	var observed *coordinationv1.Lease
	var observedAt time.Time
	for {
		cur, err := leases.Get(ctx, cfg.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := leases.Create(ctx, l.claim(&coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: cfg.Name, Namespace: cfg.Namespace},
			}), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("claiming shard lease %s/%s: %w", cfg.Namespace, cfg.Name, err)
			}
			l.lease = created
			return l, nil
		case err != nil:
			return nil, fmt.Errorf("reading shard lease %s/%s: %w", cfg.Namespace, cfg.Name, err)
		}
		holder := ptr.Deref(cur.Spec.HolderIdentity, "")
		free := holder == "" || holder == cfg.Holder
		if !free && observed != nil && renewed(observed, cur) {
			return nil, fmt.Errorf("%w: the lease %s/%s is held by %s, which renewed it while this process waited (its last renewal %s); two shards claim one ordinal: give each its own (a StatefulSet does) or stop the other",
				ErrShardClaimed, cfg.Namespace, cfg.Name, holder, renewTimeOf(cur))
		}
		if !free && observed == nil {
			observed, observedAt = cur, cfg.Clock.Now()
		}
		duration := time.Duration(ptr.Deref(cur.Spec.LeaseDurationSeconds, int32(cfg.Duration/time.Second))) * time.Second
		if free || cfg.Clock.Since(observedAt) > duration {
			updated, err := leases.Update(ctx, l.claim(cur.DeepCopy()), metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				// Someone wrote it between our read and our write: the
				// next read tells whether it is alive.
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("claiming shard lease %s/%s: %w", cfg.Namespace, cfg.Name, err)
			}
			if !free {
				klog.FromContext(ctx).Info("Took over the shard lease of a holder that stopped renewing it", "lease", klog.KObj(cur), "previousHolder", holder)
			}
			l.lease = updated
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for shard lease %s/%s held by %s: %w", cfg.Namespace, cfg.Name, holder, ctx.Err())
		case <-cfg.Clock.After(time.Second):
		}
	}
}

// claim makes lease ours, renewed now.
func (l *ShardLease) claim(lease *coordinationv1.Lease) *coordinationv1.Lease {
	now := metav1.NewMicroTime(l.cfg.Clock.Now())
	if ptr.Deref(lease.Spec.HolderIdentity, "") != l.cfg.Holder {
		lease.Spec.AcquireTime = &now
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.HolderIdentity = ptr.To(l.cfg.Holder)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(l.cfg.Duration / time.Second))
	lease.Spec.RenewTime = &now
	return lease
}

// Run renews the lease every quarter of its duration until ctx ends, then
// gives it up, so that a shard stopped on purpose is replaced at once. It
// returns an error wrapping ErrShardClaimed if another process took the
// lease meanwhile: this shard's nodes are then someone else's, and it must
// stop.
func (l *ShardLease) Run(ctx context.Context) error {
	leases := l.cfg.Client.CoordinationV1().Leases(l.cfg.Namespace)
	ticker := l.cfg.Clock.NewTicker(l.cfg.Duration / 4)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return l.release()
		case <-ticker.C():
		}
		cur, err := leases.Get(ctx, l.cfg.Name, metav1.GetOptions{})
		if err == nil && ptr.Deref(cur.Spec.HolderIdentity, "") != l.cfg.Holder {
			return fmt.Errorf("%w: %s took the shard lease %s/%s from this process; stop one of the two shards", ErrShardClaimed, ptr.Deref(cur.Spec.HolderIdentity, "someone"), l.cfg.Namespace, l.cfg.Name)
		}
		if err == nil {
			cur, err = leases.Update(ctx, l.claim(cur), metav1.UpdateOptions{})
		}
		if err != nil {
			// As a kubelet's lease: keep trying; a holder that cannot renew
			// for a whole duration is replaced, and learns it here.
			if ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Renewing the shard lease failed", "lease", klog.KRef(l.cfg.Namespace, l.cfg.Name))
			}
			continue
		}
		l.lease = cur
	}
}

// release clears the holder, if it is still this process.
func (l *ShardLease) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	leases := l.cfg.Client.CoordinationV1().Leases(l.cfg.Namespace)
	cur, err := leases.Get(ctx, l.cfg.Name, metav1.GetOptions{})
	if err != nil || ptr.Deref(cur.Spec.HolderIdentity, "") != l.cfg.Holder {
		return nil
	}
	cur.Spec.HolderIdentity = nil
	cur.Spec.RenewTime = nil
	if _, err := leases.Update(ctx, cur, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("releasing shard lease %s/%s: %w", l.cfg.Namespace, l.cfg.Name, err)
	}
	return nil
}

// renewed says whether the lease's holder renewed it, or another took it,
// between two reads.
func renewed(before, after *coordinationv1.Lease) bool {
	if ptr.Deref(before.Spec.HolderIdentity, "") != ptr.Deref(after.Spec.HolderIdentity, "") {
		return true
	}
	b, a := before.Spec.RenewTime, after.Spec.RenewTime
	if b == nil || a == nil {
		return b != a
	}
	return !a.Equal(b)
}

func renewTimeOf(l *coordinationv1.Lease) string {
	if l.Spec.RenewTime == nil {
		return "unknown"
	}
	return l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
}

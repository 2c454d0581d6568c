package dashboard

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Identity is who asks, as the API server's TokenReview or the proxy in front names them:
// what a SubjectAccessReview is asked about.
type Identity struct {
	User   string
	UID    string
	Groups []string
	Extra  map[string]authorizationv1.ExtraValue
}

// key tells identities apart for the caches: the same name with other groups (a proxy
// that says so) is another person as far as authorization goes.
func (id *Identity) key() string {
	var b strings.Builder
	b.WriteString(id.User + "\x00" + id.UID + "\x00")
	groups := slices.Clone(id.Groups)
	slices.Sort(groups)
	b.WriteString(strings.Join(groups, "\x01"))
	for _, k := range slices.Sorted(maps.Keys(id.Extra)) {
		b.WriteString("\x00" + k + "=" + strings.Join(id.Extra[k], "\x01"))
	}
	return b.String()
}

// access answers what each person may see with SubjectAccessReviews, keeping one
// person's answers for ttl, so that a page load (and every update of its stream) costs
// a review per namespace or queue once in ttl, not per request.
type access struct {
	client kubernetes.Interface
	clock  clock.PassiveClock
	ttl    time.Duration

	mu    sync.Mutex
	users map[string]*userAccess
}

// userAccess is one person's answers since made. Its maps are replaced, never changed, so
// a viewer made from them reads them without the lock.
type userAccess struct {
	mu        sync.Mutex // one person's reviews are asked one batch at a time
	made      time.Time
	admin     *bool
	allQueues *bool
	ns        map[string]bool
	queues    map[string]bool
}

func newAccess(client kubernetes.Interface, clk clock.PassiveClock, ttl time.Duration) *access {
	return &access{client: client, clock: clk, ttl: ttl, users: map[string]*userAccess{}}
}

func (a *access) user(id *Identity) *userAccess {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock.Now()
	k := id.key()
	u := a.users[k]
	if u == nil || now.Sub(u.made) >= a.ttl {
		if len(a.users) >= 4096 {
			for k, old := range a.users {
				if now.Sub(old.made) >= a.ttl {
					delete(a.users, k)
				}
			}
		}
		u = &userAccess{made: now, ns: map[string]bool{}, queues: map[string]bool{}}
		a.users[k] = u
	}
	return u
}

// viewer is what id may see of st: the namespaces and queues st names, each asked once
// in ttl.
func (a *access) viewer(ctx context.Context, id *Identity, st *State) Viewer {
	var namespaces, queues []string
	for _, w := range st.Workloads {
		namespaces = append(namespaces, w.Namespace)
	}
	for _, n := range st.Nodes {
		for _, g := range n.GPUs {
			for _, h := range g.Holders {
				ns, _, _ := strings.Cut(h.Pod, "/")
				namespaces = append(namespaces, ns)
			}
		}
	}
	for _, q := range st.Queues {
		queues = append(queues, q.Name)
	}
	return a.decide(ctx, id, namespaces, queues)
}

// canReadNamespace answers for one namespace (a workload's detail).
func (a *access) canReadNamespace(ctx context.Context, id *Identity, ns string) bool {
	return a.decide(ctx, id, []string{ns}, nil).CanReadNamespace(ns)
}

// decide asks what id may do that its answers kept do not tell: whether it is an admin,
// else about each namespace and queue named.
func (a *access) decide(ctx context.Context, id *Identity, namespaces, queues []string) Viewer {
	u := a.user(id)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.admin == nil {
		ok, err := a.review(ctx, id, authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"})
		if err != nil {
			return granted{} // not known: nothing beyond what every viewer sees
		}
		u.admin = &ok
	}
	if *u.admin {
		return Everyone{}
	}
	if u.allQueues == nil {
		// get with no name: every Queue, by any name.
		if ok, err := a.review(ctx, id, authorizationv1.ResourceAttributes{Verb: "get", Group: "allot.dev", Resource: "queues"}); err == nil {
			u.allQueues = &ok
		}
	}
	if u.allQueues != nil && *u.allQueues {
		queues = nil
	}
	u.ns = a.reviewAll(ctx, id, u.ns, unknown(u.ns, namespaces), func(ns string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Namespace: ns, Verb: "list", Resource: "pods"}
	})
	u.queues = a.reviewAll(ctx, id, u.queues, unknown(u.queues, queues), func(name string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Verb: "get", Group: "allot.dev", Resource: "queues", Name: name}
	})
	return granted{ns: u.ns, queues: u.queues, allQueues: u.allQueues != nil && *u.allQueues}
}

// unknown are the names, once each, that have no answer.
func unknown(have map[string]bool, names []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		if _, ok := have[n]; !ok && n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// reviewAll asks about names (a few at a time) and returns have with their answers added;
// a review that fails is left unanswered, to be asked again.
func (a *access) reviewAll(ctx context.Context, id *Identity, have map[string]bool, names []string, attrs func(string) authorizationv1.ResourceAttributes) map[string]bool {
	if len(names) == 0 {
		return have
	}
	answers := make([]*bool, len(names))
	var wg sync.WaitGroup
	limit := make(chan struct{}, 8)
	for i, name := range names {
		wg.Go(func() {
			limit <- struct{}{}
			defer func() { <-limit }()
			if ok, err := a.review(ctx, id, attrs(name)); err == nil {
				answers[i] = &ok
			}
		})
	}
	wg.Wait()
	out := maps.Clone(have)
	for i, name := range names {
		if answers[i] != nil {
			out[name] = *answers[i]
		}
	}
	return out
}

func (a *access) review(ctx context.Context, id *Identity, attrs authorizationv1.ResourceAttributes) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &attrs, User: id.User, UID: id.UID, Groups: id.Groups, Extra: id.Extra},
	}, metav1.CreateOptions{})
	if err != nil {
		if ctx.Err() == nil {
			slog.Warn("dashboard: SubjectAccessReview failed; showing less until it answers", "user", id.User, "verb", attrs.Verb,
				"resource", attrs.Resource, "namespace", attrs.Namespace, "err", err)
		}
		return false, err
	}
	return r.Status.Allowed && !r.Status.Denied, nil
}

// granted is a Viewer made from one person's answers (a namespace or queue not asked
// about is not granted).
type granted struct {
	ns, queues map[string]bool
	allQueues  bool
}

func (g granted) Admin() bool                     { return false }
func (g granted) CanReadNamespace(ns string) bool { return g.ns[ns] }
func (g granted) CanSeeQueue(name string) bool    { return g.allQueues || g.queues[name] }

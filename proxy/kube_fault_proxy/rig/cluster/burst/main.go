// kfp-burst sends a burst of concurrent requests through client-go's own transport, as a
// scheduler's bind wave does, and counts the TCP connections it dialed to send them.
//
// client-go (this is YuniKorn v1.9.0's client-go, v0.35.5) never waits for a free HTTP/2 stream:
// a request that finds every connection at the server's SETTINGS_MAX_CONCURRENT_STREAMS dials a
// new connection. Tools such as h2load keep a fixed number of connections and cannot show that.
//
// Output: one JSON object on stdout (dials, outcomes, completion times).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type result struct {
	Requests     int            `json:"requests"`
	Succeeded    int            `json:"succeeded"`
	Errors       map[string]int `json:"errors"`
	Dials        int64          `json:"dials"`
	DialsInBurst int64          `json:"dialsInBurst"`
	Held         int            `json:"heldWatches"`
	WallSeconds  float64        `json:"wallSeconds"`
	NthSeconds   float64        `json:"nthSeconds"`
	Nth          int            `json:"nth"`
	DoneP50      float64        `json:"doneP50Seconds"` // half the requests had completed by then
	DoneP99      float64        `json:"doneP99Seconds"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the server under test (the proxy or the apiserver)")
	n := flag.Int("n", 1000, "concurrent requests in the burst")
	hold := flag.Int("hold", 15, "watches held open during the burst, like a scheduler's informers")
	verb := flag.String("verb", "get", "get: GET a namespace; bind: POST a Binding for pods PREFIX-00000…")
	namespace := flag.String("namespace", "default", "namespace of the pods (bind) and watches")
	prefix := flag.String("prefix", "burst", "bind: pod name prefix")
	node := flag.String("node", "", "bind: the node to bind to")
	nth := flag.Int("nth", 200, "report when the nth request completed")
	qps := flag.Float64("qps", 1000, "client-side QPS (YuniKorn's default is 1000)")
	burst := flag.Int("burst", 1000, "client-side burst (YuniKorn's default is 1000)")
	timeout := flag.Duration("timeout", 120*time.Second, "bound on the whole run")
	events := flag.Int("events", 100, "watch: ConfigMap ADDED events each watch waits for")
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst, cfg.UserAgent = float32(*qps), *burst, "kfp-burst"
	var dials atomic.Int64
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second} // client-go's own
	cfg.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		dials.Add(1)
		return dialer.DialContext(ctx, network, address)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	if *verb == "watch" {
		watchAll(ctx, client, *namespace, *prefix, *n, *events)
		return
	}

	// One warm connection and the held watches, as an informer-driven scheduler has.
	if err := send(ctx, client, *verb, *namespace, *prefix+"-warm", *node); err != nil {
		fail("warm-up: %v", err)
	}
	for i := 0; i < *hold; i++ {
		w, err := client.CoreV1().ConfigMaps(*namespace).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			fail("watch %d: %v", i, err)
		}
		defer w.Stop()
	}

	before := dials.Load()
	done := make([]float64, *n)
	errs := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := send(ctx, client, *verb, *namespace, fmt.Sprintf("%s-%05d", *prefix, i), *node)
			elapsed := time.Since(start).Seconds()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[short(err)]++
				done[i] = -1
			} else {
				done[i] = elapsed
			}
		}(i)
	}
	wg.Wait()
	wall := time.Since(start).Seconds()

	ok := make([]float64, 0, *n)
	for _, t := range done {
		if t >= 0 {
			ok = append(ok, t)
		}
	}
	sort.Float64s(ok)
	r := result{Requests: *n, Succeeded: len(ok), Errors: errs, Dials: dials.Load(),
		DialsInBurst: dials.Load() - before, Held: *hold, WallSeconds: wall, Nth: *nth}
	if len(ok) >= *nth && *nth > 0 {
		r.NthSeconds = ok[*nth-1]
	}
	if len(ok) > 0 {
		r.DoneP50 = ok[len(ok)/2]
		r.DoneP99 = ok[(len(ok)*99)/100]
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

// watchAll opens n watches on the namespace's ConfigMaps (named prefix…), says "ready" on stderr once all are
// open, and prints when (Unix seconds) each watch saw each ADDED object, once each has seen events.
func watchAll(ctx context.Context, client *kubernetes.Clientset, namespace, prefix string, n, events int) {
	arrivals := make([]map[string]float64, n)
	var wg sync.WaitGroup
	var opened sync.WaitGroup
	opened.Add(n)
	for i := 0; i < n; i++ {
		w, err := client.CoreV1().ConfigMaps(namespace).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			fail("watch %d: %v", i, err)
		}
		opened.Done()
		arrivals[i] = map[string]float64{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer w.Stop()
			for ev := range w.ResultChan() {
				now := float64(time.Now().UnixNano()) / 1e9
				if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == "ADDED" && strings.HasPrefix(cm.Name, prefix) {
					arrivals[i][cm.Name] = now
					if len(arrivals[i]) >= events {
						return
					}
				}
			}
		}(i)
	}
	opened.Wait()
	fmt.Fprintln(os.Stderr, "ready")
	wg.Wait()
	out, _ := json.Marshal(map[string]any{"watches": n, "arrivals": arrivals})
	fmt.Println(string(out))
}

// send makes one request: a Binding POST (bind) or a GET of the namespace (get).
func send(ctx context.Context, client *kubernetes.Clientset, verb, namespace, name, node string) error {
	if verb == "bind" {
		return client.CoreV1().Pods(namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}, metav1.CreateOptions{})
	}
	_, err := client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	return err
}

func short(err error) string {
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kfp-burst: "+format+"\n", args...)
	os.Exit(2)
}

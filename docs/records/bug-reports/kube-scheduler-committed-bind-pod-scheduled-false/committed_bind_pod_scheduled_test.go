/*
Copyright 2026 The Kubernetes Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// To be copied into pkg/scheduler/ of kubernetes/kubernetes (tested against v1.36.3):
//
//	go test ./pkg/scheduler/ -run TestBindingCommittedButAnsweredWithError -count=1 -v

package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2/ktesting"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/features"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
)

// TestBindingCommittedButAnsweredWithError: the apiserver commits the Binding (spec.nodeName set,
// PodScheduled=True, as BindingREST.setPodNodeAndMetadata does) but the scheduler gets an error
// answer (the apiserver's 504 Timeout Status). A later Binding of the same pod is refused with 409
// "already assigned", as the apiserver does. The pod is bound, so PodScheduled must end True.
func TestBindingCommittedButAnsweredWithError(t *testing.T) {
	for _, asyncAPICalls := range []bool{true, false} {
		t.Run(fmt.Sprintf("SchedulerAsyncAPICalls=%v", asyncAPICalls), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.SchedulerAsyncAPICalls, asyncAPICalls)

			node := st.MakeNode().Name("node1").UID("node1").Obj()
			pod := st.MakePod().Namespace("default").Name("pod1").UID("pod1").SchedulerName(v1.DefaultSchedulerName).Obj()
			client := clientsetfake.NewClientset(node, pod)
			podsGVR := v1.SchemeGroupVersion.WithResource("pods")

			var mu sync.Mutex
			var bindings []string
			client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
				if action.GetSubresource() != "binding" {
					return false, nil, nil
				}
				binding := action.(clienttesting.CreateAction).GetObject().(*v1.Binding)
				mu.Lock()
				defer mu.Unlock()
				obj, err := client.Tracker().Get(podsGVR, binding.Namespace, binding.Name)
				if err != nil {
					return true, nil, err
				}
				stored := obj.(*v1.Pod).DeepCopy()
				if stored.Spec.NodeName != "" {
					bindings = append(bindings, "409 already assigned")
					return true, nil, apierrors.NewConflict(v1.Resource("pods/binding"), binding.Name,
						fmt.Errorf("pod %v is already assigned to node %q", binding.Name, stored.Spec.NodeName))
				}
				// Commit, as the apiserver does ...
				stored.Spec.NodeName = binding.Target.Name
				podutil.UpdatePodCondition(&stored.Status, &v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue})
				if err := client.Tracker().Update(podsGVR, stored, binding.Namespace); err != nil {
					return true, nil, err
				}
				bindings = append(bindings, "committed, answered 504")
				// ... then answer with the apiserver's own timeout Status.
				return true, nil, apierrors.NewTimeoutError("request did not complete within requested timeout - context deadline exceeded", 0)
			})
			statusPatches := make(chan struct{}, 100)
			client.PrependReactor("patch", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
				if action.GetSubresource() == "status" {
					statusPatches <- struct{}{}
				}
				return false, nil, nil
			})

			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
			informerFactory := informers.NewSharedInformerFactory(client, 0)
			sched, err := New(ctx, client, informerFactory, nil, profile.NewRecorderFactory(broadcaster),
				WithProfiles(schedulerapi.KubeSchedulerProfile{
					SchedulerName: v1.DefaultSchedulerName,
					Plugins: &schedulerapi.Plugins{
						QueueSort: schedulerapi.PluginSet{Enabled: []schedulerapi.Plugin{{Name: "PrioritySort"}}},
						Bind:      schedulerapi.PluginSet{Enabled: []schedulerapi.Plugin{{Name: "DefaultBinder"}}},
					},
				}))
			if err != nil {
				t.Fatal(err)
			}
			informerFactory.Start(ctx.Done())
			informerFactory.WaitForCacheSync(ctx.Done())
			if err := sched.WaitForHandlersSync(ctx); err != nil {
				t.Fatal(err)
			}
			go sched.Run(ctx)

			// Wait for the pod to be bound, then for the scheduler's status patches to settle.
			deadline := time.After(10 * time.Second)
			quiet := 2 * time.Second
			for settled := false; !settled; {
				select {
				case <-statusPatches:
				case <-time.After(quiet):
					obj, err := client.Tracker().Get(podsGVR, "default", "pod1")
					settled = err == nil && obj.(*v1.Pod).Spec.NodeName != ""
				case <-deadline:
					settled = true
				}
			}

			obj, err := client.Tracker().Get(podsGVR, "default", "pod1")
			if err != nil {
				t.Fatal(err)
			}
			got := obj.(*v1.Pod)
			mu.Lock()
			t.Logf("bindings: %v", bindings)
			mu.Unlock()
			if got.Spec.NodeName != "node1" {
				t.Fatalf("pod bound to %q, want node1", got.Spec.NodeName)
			}
			_, cond := podutil.GetPodCondition(&got.Status, v1.PodScheduled)
			if cond == nil || cond.Status != v1.ConditionTrue {
				t.Errorf("pod is bound to %s but its PodScheduled condition is %+v, want status True", got.Spec.NodeName, cond)
			}
		})
	}
}

/*
 Licensed to the Apache Software Foundation (ASF) under one
 or more contributor license agreements.  See the NOTICE file
 distributed with this work for additional information
 regarding copyright ownership.  The ASF licenses this file
 to you under the Apache License, Version 2.0 (the
 "License"); you may not use this file except in compliance
 with the License.  You may obtain a copy of the License at

     http://www.apache.org/licenses/LICENSE-2.0

 Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an "AS IS" BASIS,
 WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 See the License for the specific language governing permissions and
 limitations under the License.
*/

// Drop this file into pkg/shim/ of apache/yunikorn-k8shim (written against v1.9.0) and run
//   go test ./pkg/shim/ -run TestRecoveredRunningPodNotAssumed -count=1 -v

package shim

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apis "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apache/yunikorn-k8shim/pkg/cache"
	"github.com/apache/yunikorn-k8shim/pkg/common"
	siCommon "github.com/apache/yunikorn-scheduler-interface/lib/go/common"
)

// A pod that is bound and Running when the scheduler starts is recovered as an existing allocation.
// No bind follows for it, so once recovery is done it must not be left assumed in the shim's cache
// (nothing would ever confirm the assumption; only a later update of the pod clears it).
func TestRecoveredRunningPodNotAssumed(t *testing.T) {
	cluster := MockScheduler{}
	cluster.init()

	// the cluster as the restarted scheduler finds it: one node, one pod already running on it
	zero := resource.Scale(0)
	capacity := v1.ResourceList{
		v1.ResourcePods:   *resource.NewScaledQuantity(10, zero),
		v1.ResourceMemory: *resource.NewScaledQuantity(100000000, zero),
		v1.ResourceCPU:    *resource.NewScaledQuantity(10, zero),
	}
	cluster.AddNodeToLister(&v1.Node{
		ObjectMeta: apis.ObjectMeta{Name: "test.host.01"},
		Status:     v1.NodeStatus{Allocatable: capacity, Capacity: capacity},
	})
	taskResource := common.NewResourceBuilder().
		AddResource(siCommon.Memory, 50000000).
		AddResource(siCommon.CPU, 5).
		Build()
	pod := createTestPod("root.default", "app0001", "task0001", taskResource)
	pod.Spec.NodeName = "test.host.01"
	pod.Status.Phase = v1.PodRunning
	cluster.AddPodToLister(pod)

	// start the scheduler: InitializeState recovers the pod, the core books it as an existing
	// allocation and sends it back to the shim's allocation callback
	assert.NilError(t, cluster.start(), "failed to start cluster")
	defer cluster.stop()

	err := cluster.waitAndVerifySchedulerAllocations("root.default", "[mycluster]default", "app0001", 1)
	assert.NilError(t, err, "the recovered pod is not booked in the core")
	cluster.waitAndAssertTaskState(t, "app0001", "task0001", cache.TaskStates().Bound)
	time.Sleep(time.Second) // let the callback finish with the allocation

	schedulerCache := cluster.context.GetSchedulerCache()
	assert.Assert(t, schedulerCache.GetPod("task0001") != nil, "the recovered pod is not in the shim's cache")
	assert.Equal(t, schedulerCache.GetPod("task0001").Spec.NodeName, "test.host.01")
	assert.Equal(t, schedulerCache.GetSchedulerCacheDao().Statistics.Assumed, 0,
		"the pod was bound and Running before the scheduler started, yet the shim's cache counts it as assumed")
	assert.Assert(t, !schedulerCache.IsAssumedPod("task0001"),
		"the recovered Running pod task0001 is left assumed in the shim's cache")
}

package dynamicresources

import (
	"testing"

	"github.com/stretchr/testify/assert"

	v1 "k8s.io/api/core/v1"
	schedulingapi "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
)

// TestPodGroupPostFilterWhenNoPodRanPreFilter covers a pod group scheduling
// cycle that ends before any of its pods is evaluated. The gang plugin's
// PlacementFeasible returns Unschedulable at the start of the cycle when the
// queued pods plus the scheduled ones are fewer than minCount (for example a
// member behind a scheduling gate, a member deleted, or a member whose Binding
// failed and is in backoff). podGroupSchedulingDefaultAlgorithm then returns
// Unschedulable without running any pod's PreFilter, and podGroupCycle calls
// RunPodGroupPostFilterPlugins with a PodGroupCycleState that holds no state of
// this plugin.
//
// PodGroupPostFilter reads that state with
// getPodGroupStateDataFromPodGroupCycleState, which returns fwk.ErrNotFound,
// and turns it into an Error status. The framework stops at an Error, so the
// cycle fails with `error in "DynamicResources" PodGroupPostFilter plugins:
// not found` and no later PodGroupPostFilter plugin (DefaultPreemption comes
// after DynamicResources in the default profile) runs. The pod group has no
// claim to deallocate: the plugin should say Unschedulable, as PostFilter does
// for a pod without claims.
//
// The test asserts that behaviour, so it fails on v1.38.0-beta.0.
func TestPodGroupPostFilterWhenNoPodRanPreFilter(t *testing.T) {
	tCtx := ktesting.Init(t)
	featuregatetesting.SetFeatureGatesDuringTest(tCtx, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: true,
	})
	group := st.MakePodGroup().Name(podGroupName).Namespace(namespace).UID(types.UID(podGroupUID)).Obj()
	member := st.MakePod().Name(podName).Namespace(namespace).UID(podUID).PodGroupName(podGroupName).Obj()
	// The features TestPodGroupPostFilter sets (without which the plugin's
	// default args do not validate).
	feats := feature.Features{
		EnableDRAAdminAccess:               true,
		EnableDRADeviceBindingConditions:   true,
		EnableDRAResourceClaimDeviceStatus: true,
		EnableDRASchedulerFilterTimeout:    true,
	}
	testCtx := setup(tCtx, nil, []*v1.Node{workerNode}, nil, nil, []*schedulingapi.PodGroup{group}, nil, feats, false, nil)
	pgInfo := &framework.PodGroupInfo{
		GenericPodGroup: fwk.NewGenericPodGroup(group),
		UnscheduledPods: []*v1.Pod{member},
	}

	// The cycle ended before any pod ran PreFilter: the PodGroupCycleState
	// holds nothing of this plugin.
	_, status := testCtx.p.PodGroupPostFilter(tCtx, framework.NewCycleState(), pgInfo, nil)
	assert.False(tCtx, status.IsError(), "PodGroupPostFilter of a pod group no pod of which ran PreFilter: %v", status.AsError())
	assert.Equal(tCtx, fwk.Unschedulable, status.Code(), status.Message())

	// The same pod group once its pod ran PreFilter (which always writes the
	// group's state, claims or not): Unschedulable.
	evaluated := framework.NewCycleState()
	evaluated.Write(stateKey, &podGroupStateData{
		pendingAllocations: make(map[types.UID]sets.Set[types.UID]),
		podsStateData:      map[types.NamespacedName]*stateData{{Namespace: namespace, Name: podName}: {}},
	})
	_, status = testCtx.p.PodGroupPostFilter(tCtx, evaluated, pgInfo, nil)
	assert.Equal(tCtx, fwk.Unschedulable, status.Code(), status.Message())
}

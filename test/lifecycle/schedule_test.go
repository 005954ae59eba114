package lifecycle

import "github.com/kairos-capi/kairos-capi/test/framework"

// slots hands out the package's scenario slots, longest scenario first (framework.Scheduler: go
// test admits parallel tests in no set order, and the longest ones used to start last). Every
// scenario calls slots.Parallel; TestMain sets the capacity. Seconds are the durations of the
// longest scenarios, measured with hack/test-times.sh (the slower distribution).
var slots = &framework.Scheduler{Seconds: map[string]int{
	"TestRestartMidRollout":                        420, // both distributions in turn, own manager
	"TestRollout":                                  415,
	"TestEtcdMemberDownBlocksRemovals":             375,
	"TestEtcdPartitionAndPowerOff":                 285,
	"TestHAScaleUpAndDown":                         235,
	"TestTwoUnhealthyMachinesRecover":              215,
	"TestUnmatchedEtcdMemberBlocksRemovals":        195,
	"TestHAControlPlaneUpgradesInPlace":            190,
	"TestVirtualIPSurvivesLosingItsHolder":         175,
	"TestAPIServerPortBehindLoadBalancer":          165,
	"TestRemediation":                              165,
	"TestWorkersUpgradeInPlace":                    160,
	"TestVanishedVMIsReplaced":                     150,
	"TestSingleNodeRestoresFromSnapshot":           170, // targeted runs, both distributions side by side: 152-165 s with the on-demand request
	"TestMachinePoolAddsNodeAfterJoinTokenExpired": 145,
	"TestSingleNodeUpgradesInPlace":                110,
	"TestPauseAndResume":                           105,
}}

//! What several targets check alike.

use gmq_core::slurm_text::{JobInfo, JobRecord};

/// The two readers of one job agree on who it is: account, partition, QOS, user and priority.
pub fn same_job_identity(record: &JobRecord, info: &JobInfo, input: &str) {
    assert_eq!(
        (
            &record.account,
            &record.partition,
            &record.qos,
            record.user_id,
            record.priority
        ),
        (
            &info.account,
            &info.partition,
            &info.qos,
            info.user_id,
            info.priority
        ),
        "{input:?}"
    );
}

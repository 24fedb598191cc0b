//! An owner that does not run the thread through the engine answers
//! `owner_unsupported`, and nothing is touched.

use winx_release_engine::read::{read_pinned, Keep};
use winx_release_engine::{
    release, Admission, Layout, Outcome, Reason, ReleaseOptions, ReleaseRequest, Status, Target, Unsupported,
};

#[test]
fn a_thread_the_host_does_not_count_is_owner_unsupported() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("ws")).unwrap();
    let layout = Layout::new(root.join("ws"), root.join("data")).unwrap();
    layout.create_session_dir("zsh-thread").unwrap();
    let helper = layout.session_dir("zsh-thread").join("h.sh");
    std::fs::write(&helper, "true\n").unwrap();
    let pin = read_pinned(&layout.session_dir("zsh-thread"), &helper, Keep::Nothing).unwrap().pin;
    let targets = [Target::new(&helper, pin)];
    let rr = ReleaseRequest { layout: &layout, thread_id: "zsh-thread", targets: &targets };
    let _no_fork = crate::common::no_fork_now();
    let report = release(&rr, &Admission::new().enter(), &Unsupported, &ReleaseOptions::default());
    assert_eq!((report.status, report.error_code), (Status::Denied, Some(Reason::OwnerUnsupported)), "{report}");
    assert_eq!(report.files[0].outcome, Outcome::Denied);
    assert!(helper.exists());
}

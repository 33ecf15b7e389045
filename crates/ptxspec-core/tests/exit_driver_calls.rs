//! Exit waits for a driver call of ptxspec's background threads
//! (`toolkit::exit::background_driver_call`): a child process whose other
//! thread makes such calls one after another when the main thread exits
//! ends between two of them — the CUDA driver is not torn down under one —
//! and none begins once exit's hook holds the driver. No driver is needed:
//! the guard and exit's hook are what is tested.

use std::io::Write as _;
use std::process::Command;
use std::time::Duration;

use ptxspec_core::toolkit::exit::{DriverMoment, background_driver_call, driver_used};

/// The environment variable that makes the test its child (the marker
/// file's path).
const CHILD: &str = "PTXSPEC_TEST_EXIT_DRIVER_CALL";

#[test]
fn exit_waits_for_a_background_driver_call() {
    if let Some(marker) = std::env::var_os(CHILD) {
        let (inside, is_inside) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut log = std::fs::File::create(&marker).expect("the marker is made");
            for n in 0u64.. {
                let call = background_driver_call();
                let _ = writeln!(log, "inside {n}");
                if n == 0 {
                    let _ = inside.send(());
                }
                // A call that takes a while: exit comes during one.
                std::thread::sleep(Duration::from_millis(20));
                let _ = writeln!(log, "outside {n}");
                drop(call);
            }
        });
        is_inside
            .recv_timeout(Duration::from_secs(60))
            .expect("the thread began its calls");
        driver_used(DriverMoment::ContextMade);
        std::process::exit(0);
    }
    let dir = std::env::temp_dir().join(format!("ptxspec-exit-driver-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("marker");
    for round in 0..5 {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "exit_waits_for_a_background_driver_call",
                "--nocapture",
            ])
            .env(CHILD, &marker)
            .output()
            .unwrap();
        assert!(out.status.success(), "round {round}: {out:?}");
        let log = std::fs::read_to_string(&marker).unwrap();
        let last = log.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("outside"),
            "round {round}: the process ended inside a driver call ({last:?})"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
